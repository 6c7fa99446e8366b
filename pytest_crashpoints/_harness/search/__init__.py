"""The search over schedules: the space of one test's schedules, exploring it (exhaustive or
Hypothesis, shrinking, the rerun), the states engine, parallel jobs, replay tokens, the
exploration's report."""
