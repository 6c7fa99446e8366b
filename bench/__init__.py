"""Benchmarks of pytest-crashpoints. Run them all with ``make bench``.

Each item is a module runnable on its own (``python -m bench.crash_case``) that prints one
JSON result; ``python -m bench`` runs every item in a fresh interpreter, writes
``bench/results.json`` and regenerates the table in ``docs/performance.md``. Every figure is a
ratio against a floor measured in the same run, over several repetitions (median and spread).
"""
