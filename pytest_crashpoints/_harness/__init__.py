"""One crash case and the exploration of many: the world of a case, its steps, the quiet
phase, the evidence, the six invariants, schedules, replay tokens, reports, and the
reference agent.

Built on the core and on ``_process``; imports ``fake_providers`` for the world of a case.
"""
