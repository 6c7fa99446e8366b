"""The pytest side: the ``crashpoints`` fixture, the marker, options and the settings
resolver, the terminal summary and the JSON report. ``plugin.py`` holds only the hooks.
"""
