import pytest
from pytest_crashpoints import reference_recovery, reference_worker
from scenarios.broken.test_broken_agents import ORDER_WITH_RECEIPT

@pytest.mark.crashpoints(points="ABCDEF", providers=["payments", "email"], mode="exhaustive", max_faults=2)
def test_b2(crashpoints):
    crashpoints.run(worker=reference_worker, recover=reference_recovery, messages=[ORDER_WITH_RECEIPT])
