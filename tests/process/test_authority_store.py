"""The authority store (E): changed by the harness, read by workers, every change kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_crashpoints import Authority
from pytest_crashpoints._harness.storage.authority_store import AuthorityStore
from pytest_crashpoints._process.outcome import Completed
from pytest_crashpoints._process.worker import run_worker
from pytest_crashpoints.errors import HarnessUsageError, UnknownTask
from pytest_crashpoints.harness import HarnessClock

GRANT = Authority.of(tenant_id="t7", credential_scope="mail.send mail.read", policy_version="v1")


@pytest.fixture
def clock(tmp_path: Path) -> HarnessClock:
    return HarnessClock(tmp_path / "clock")


@pytest.fixture
def store(tmp_path: Path, clock: HarnessClock) -> AuthorityStore:
    return AuthorityStore(tmp_path / "authority.sqlite3", clock=clock.now)


def test_changes_between_steps_are_recorded_with_harness_time(
    store: AuthorityStore, clock: HarnessClock
) -> None:
    store.set("task-1", GRANT)
    clock.advance(10)
    narrowed = store.narrow_scope("task-1", "mail.read")
    clock.advance(5)
    bumped = store.bump_policy("task-1", "v2")
    moved = store.move_tenant("task-1", "t8")
    clock.advance(1)
    store.revoke("task-1", reason="credential leaked")
    assert narrowed.credential_scope == {"mail.read"}
    assert (bumped.policy_version, moved.tenant_id) == ("v2", "t8")
    assert store.current("task-1") is None
    history = store.changes("task-1")
    assert [(c.at, c.reason) for c in history] == [
        (0.0, "granted"),
        (10.0, "scope narrowed"),
        (15.0, "policy version bumped"),
        (15.0, "moved to another tenant"),
        (16.0, "credential leaked"),
    ]
    assert history[0].authority == GRANT
    assert history[-1].authority is None


def test_workers_read_the_current_authority(store: AuthorityStore) -> None:
    store.set("task-1", GRANT)
    store.bump_policy("task-1", "v2")
    outcome = run_worker(lambda: store.current("task-1"))
    assert isinstance(outcome, Completed)
    assert outcome.value == Authority.of(
        tenant_id="t7", credential_scope="mail.read mail.send", policy_version="v2"
    )


def test_a_store_crosses_a_spawn(store: AuthorityStore) -> None:
    store.set("task-1", GRANT)
    outcome = run_worker(lambda: store.current("task-1"), start_method="spawn", timeout=30)
    assert isinstance(outcome, Completed), outcome
    assert outcome.value == GRANT


def test_refusals(store: AuthorityStore) -> None:
    with pytest.raises(UnknownTask, match="no authority was ever granted for task 'nope'"):
        store.current("nope")
    store.set("task-1", GRANT)
    with pytest.raises(HarnessUsageError, match="is not within"):
        store.narrow_scope("task-1", "mail.send admin")
    store.revoke("task-1")
    with pytest.raises(HarnessUsageError, match="is revoked"):
        store.bump_policy("task-1", "v3")
    assert len(store.changes()) == 2
