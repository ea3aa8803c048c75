"""The fault suite (``bench/chaos.py``, ``testbed/chaos/``) on a shorter schedule, and its negative controls.

Ten faults, every kind at least once (SIGKILL, rolling SIGTERM restarts, zombies
past the session timeout, Redis restarts after SIGTERM and SIGKILL, the authority
SIGKILLed, the broker SIGKILLed and restarted), while out-of-order input with re-sent
ids and malformed records flows. Every check of ``testbed/chaos/check.py`` must find
nothing, and every interval must progress again soon after the last fault. The
negative controls turn dedup off, and the fencing check off (with workers that stop
themselves at a commit, zombies that commit when resumed): the same checks must catch
them. The rollback scenario (Redis loses the tail of its writes) must stop the workers
before any second payload; with the detection off, second payloads appear.
"""

from __future__ import annotations

import pytest

from testbed.chaos.suite import KINDS, parse, run

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_every_fault_kind_keeps_exactly_once_and_progress() -> None:
    result = run(parse(["--faults", "10", "--gap", "2", "--rate", "500", "--seed", "3"]))
    assert sum(result["faults"].values()) == 10
    assert set(result["faults"]) == set(KINDS), result["faults"]
    assert result["checks"] == dict.fromkeys(result["checks"], 0), result
    assert result["verdict"] == "exactly_once"
    assert result["progress_after_last_fault_s"] <= 10, result
    assert result["records_sent"] > 10_000 and result["malformed_sent"] > 0


@pytest.mark.negative_control
def test_negative_control_dedup_off_is_caught() -> None:
    args = ["--faults", "1", "--kinds", "worker_kill", "--gap", "2", "--rate", "500"]
    result = run(parse([*args, "--worker-env", '{"MW_UNSAFE_DISABLE_DEDUP": "1"}']))
    assert result["verdict"] == "violated"
    checks = result["checks"]
    assert checks["conflicting_payloads"] + checks["duplicate_outputs"] + checks["wrong_running_sums"] > 0, (
        result
    )


@pytest.mark.negative_control
def test_negative_control_fencing_off_is_caught() -> None:
    # Each worker stops itself once at a commit (with productions) and is resumed after
    # the session timeout: a zombie that commits what it holds, unfenced.
    env = '{"MW_UNSAFE_DISABLE_FENCING": "1", "MW_FAULTS": "before_commit:stop:1:once:after=300"}'
    args = ["--faults", "1", "--kinds", "worker_kill", "--gap", "8", "--rate", "500"]
    result = run(parse([*args, "--worker-env", env]))
    assert result["verdict"] == "violated", result
    checks = result["checks"]  # the zombies' unfenced commits: the exactly-once checks see them
    exactly_once = ("duplicate_outputs", "lost_records", "conflicting_payloads", "wrong_state")
    exactly_once += ("wrong_running_sums", "wrong_windows")  # (a zombie's second count shows there too)
    assert sum(checks[c] for c in exactly_once) > 0, checks


def test_rolling_restarts_never_stall() -> None:
    """Two workers over six intervals, SIGTERMed and restarted at once in turn every
    2 to 4 s (the operator's rolling deploy, issue 14): every interval keeps moving."""
    args = ["--faults", "8", "--kinds", "worker_restart", "--workers", "2", "--gap", "3", "--rate", "500"]
    result = run(parse(args))
    assert result["verdict"] == "exactly_once", result
    assert result["progress_after_last_fault_s"] <= 10, result
    assert result["longest_stall_s"] <= 10, result
    assert result["handover_s"]["max"] is not None and result["handover_s"]["max"] <= 5, result


def test_a_store_rollback_stops_the_workers_before_a_second_payload() -> None:
    """Redis run volatile loses its last 3 s of writes (an older copy of its append-only
    files restored): the workers find the store behind the commit witness and stop,
    and no output id carries two different payloads."""
    result = run(parse(["--scenario", "rollback", "--rate", "500", "--lag", "3"]))
    assert result["rollback_detected"] is True, result
    assert result["all_workers_stopped"] is True, result
    assert result["second_payloads"] == 0, result
    assert result["verdict"] == "stopped_before_second_payload", result


@pytest.mark.negative_control
def test_negative_control_rollback_detection_off_gives_second_payloads() -> None:
    env = '{"MW_UNSAFE_IGNORE_ROLLBACK": "1"}'
    result = run(parse(["--scenario", "rollback", "--rate", "500", "--lag", "3", "--worker-env", env]))
    assert result["rollback_detected"] is False, result
    assert result["second_payloads"] > 0, result
    assert result["verdict"] == "violated", result
