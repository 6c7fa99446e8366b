"""Real subprocesses: the worker runner (outcomes, the child side, the parent's handle), the
fork server, forced interleavings, duplicate delivery, and the harness clock.

Sits on the core (``errors``, ``_inject``); knows nothing of ledgers, providers or cases.
"""
