"""The verdict of a case: the evidence it left, effects linked to ledger rows, the six
invariants and your own, the timeline, a failing case as data, printable text."""
