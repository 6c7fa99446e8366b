"""Where the ledger lives: canonical arguments and their hash, authority, states and their
transitions, the reference SQLite ledger, and the views that read any ledger.

Imports only ``errors`` and ``_inject`` (the ledger's writes are fail points).
"""
