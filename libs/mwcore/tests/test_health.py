"""The worker's health rules (health.py), on numbers: when /healthz gives a reason."""

from __future__ import annotations

from mwcore.runtime.health import Health, Offsets


def test_an_assigned_interval_with_input_waiting_and_no_commit_is_named() -> None:
    h = Health(stall_s=10)
    h.progressed(0, now=100.0)
    h.progressed(1, now=100.0)
    h.check_assigned(105.0, [(0, 50), (1, 0)])
    assert h.problem() is None  # not long enough
    h.progressed(1, now=112.0)
    h.check_assigned(112.0, [(0, 50), (1, 0)])
    assert h.problem() is not None and h.problem().startswith("interval 0 has not committed for 12 s")
    assert "50 records wait" in (h.problem() or "")
    h.progressed(0, now=113.0)
    h.check_assigned(113.0, [(0, 50), (1, 0)])
    assert h.problem() is None  # it committed again


def test_an_idle_interval_with_nothing_waiting_is_healthy() -> None:
    h = Health(stall_s=10)
    h.progressed(0, now=0.0)
    h.check_assigned(1000.0, [(0, 0)])
    assert h.problem() is None


def test_a_worker_without_partitions_is_unhealthy_only_while_nobody_progresses() -> None:
    h = Health(stall_s=10)
    ends: Offsets = {("t", 0): 100, ("t", 1): 100}
    committed: Offsets = {("t", 0): 40, ("t", 1): 100}
    queried = []

    def state() -> tuple[Offsets, Offsets]:
        queried.append(1)
        return dict(committed), ends

    h.check_unassigned(0.0, state)
    assert h.problem() is None and not queried  # not waited long enough: no query
    h.check_unassigned(10.0, state)
    assert h.problem() is None  # the group's positions were just seen: not yet still
    h.check_unassigned(21.0, state)
    reason = h.problem() or ""
    assert reason.startswith("no interval assigned for 21 s while 60 records wait"), reason
    committed[("t", 0)] = 70  # another member is processing: a spare worker is fine
    h.check_unassigned(22.0, state)
    assert h.problem() is None
    committed[("t", 0)] = 100  # everything consumed
    h.check_unassigned(40.0, state)
    assert h.problem() is None


def test_an_assignment_resets_the_unassigned_clock() -> None:
    h = Health(stall_s=10)
    h.check_unassigned(0.0, lambda: ({("t", 0): 0}, {("t", 0): 5}))
    h.check_assigned(5.0, [])
    h.check_unassigned(6.0, lambda: ({("t", 0): 0}, {("t", 0): 5}))
    h.check_unassigned(15.0, lambda: ({("t", 0): 0}, {("t", 0): 5}))
    assert h.problem() is None  # 9 s unassigned since the last assignment
