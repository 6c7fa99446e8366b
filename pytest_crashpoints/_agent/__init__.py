"""What production agent code runs: the safe-order ``guarded_call``, the reference recovery,
and the reference adapters of the bundled providers.

Built on ``_ledger`` and ``_inject``; nothing here knows about tests or processes.
"""
