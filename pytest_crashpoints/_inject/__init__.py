"""Where kills are injected: fail points (``crashpoint()``), the HTTP crash transport, and the
hooks that place fail points without user code (at the wire, at every SQLite commit, before
every sync of a file of the agent's).

The lowest layer of the package: it imports nothing of pytest-crashpoints but ``errors``.
"""
