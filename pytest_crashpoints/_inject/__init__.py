"""Where kills are injected: fail points (``crashpoint()``) and the HTTP crash transport.

The lowest layer of the package: it imports nothing of pytest-crashpoints but ``errors``.
"""
