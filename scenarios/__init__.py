"""Bundled crash scenarios: good agents that must survive every schedule, and (in
``scenarios.broken``) deliberately broken agents the harness must catch.

Run them with the plugin switched on (this repository's own suite switches it off)::

    pytest -p crashpoints scenarios
"""
