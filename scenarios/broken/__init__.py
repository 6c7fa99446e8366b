"""Deliberately broken agents and the crash tests that must catch them (see README.md)."""
