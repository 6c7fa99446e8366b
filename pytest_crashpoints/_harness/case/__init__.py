"""One case: its scenario and world, the schedule's steps as real processes, the quiet
phase, a worker that is a command, the reference agent, and ``run_case`` top down."""
