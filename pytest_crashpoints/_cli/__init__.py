"""The ``crashpoints`` command: ``gate``, ``replay``, ``show`` and ``queue``."""
