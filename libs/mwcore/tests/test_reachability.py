"""The probe's bookkeeping (``process/reachability.py``) with asks that answer or fail as
told, and the one line a process stops with when Redis or the broker is lost mid-run
(``bootstrap.main``). The probe against a real Redis and broker cut off by a proxy is
``tests/test_network.py``."""

from __future__ import annotations

import pytest
import redis
import structlog
from confluent_kafka import KafkaError, KafkaException

from mwcore.process import reachability
from mwcore.process.bootstrap import LOST, main
from mwcore.process.reachability import Dependency, Probe


class Switch:
    """An ask that fails while ``down`` is set."""

    def __init__(self) -> None:
        self.down: str | None = None

    def __call__(self, timeout_s: float) -> None:
        if self.down is not None:
            raise ConnectionError(self.down)


def _probe(switch: Switch) -> tuple[Probe, Dependency]:
    dep = Dependency("redis", "redis://127.0.0.1:1/0", switch)
    return Probe("worker", [dep]), dep


def test_an_outage_is_said_once_shown_in_healthz_and_counted_then_its_end_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reachability, "HEALTH_GRACE_S", 0.0)
    switch = Switch()
    probe, dep = _probe(switch)
    with structlog.testing.capture_logs() as logs:
        probe.ask(dep)
        assert probe.problem() is None
        switch.down = "Connection refused"
        probe.ask(dep)
        probe.ask(dep)  # within REPEAT_S: not said again
        problem = probe.problem()
        up = {m.name: m.samples[0].value for m in probe.families()}
        switch.down = None
        probe.ask(dep)
    assert problem is not None and problem.startswith("cannot reach Redis at redis://127.0.0.1:1/0 for ")
    assert problem.endswith("Connection refused"), problem
    assert up["mw_dependency_up"] == 0 and up["mw_dependency_outages"] == 1
    assert [e["event"] for e in logs] == ["dependency_unreachable", "dependency_reachable"]
    assert logs[0]["dependency"] == "redis" and "Connection refused" in logs[0]["error"]
    assert probe.problem() is None
    assert {m.name: m.samples[0].value for m in probe.families()}["mw_dependency_up"] == 1


def test_a_long_outage_is_said_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reachability, "REPEAT_S", 0.0)
    switch = Switch()
    probe, dep = _probe(switch)
    switch.down = "timed out"
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            probe.ask(dep)
    assert [e["event"] for e in logs] == ["dependency_unreachable"] * 3
    assert {m.name: m.samples[0].value for m in probe.families()}["mw_dependency_outages"] == 1


def test_a_short_outage_does_not_turn_healthz(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Redis restart the clients ride out: logged, counted, but /healthz stays 200
    (``tests/test_metrics.py`` restarts Redis under a worker and expects it)."""
    switch = Switch()
    probe, dep = _probe(switch)
    switch.down = "Connection refused"
    probe.ask(dep)
    assert probe.problem() is None
    assert {m.name: m.samples[0].value for m in probe.families()}["mw_dependency_up"] == 0
    monkeypatch.setattr(reachability, "HEALTH_GRACE_S", 0.0)
    assert probe.problem() is not None


def test_a_silent_timeout_says_how_long_it_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reachability, "HEALTH_GRACE_S", 0.0)

    def silent(timeout_s: float) -> None:
        raise TimeoutError()

    dep = Dependency("broker", "127.0.0.1:9092", silent)
    probe = Probe("worker", [dep], timeout_s=2)
    probe.ask(dep)
    assert probe.problem() is not None and probe.problem().endswith("no answer within 2 s")  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."), "Redis"),
        (redis.TimeoutError("Timeout reading from socket"), "Redis"),
        (KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)), "the Kafka broker"),
    ],
)
def test_a_dependency_lost_mid_run_is_one_line_and_exit_75(
    error: Exception, lost: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def body() -> int:
        raise error

    assert main(body) == LOST == 75
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"mw: stopped: lost {lost} ("), err
    assert "start it again once it answers" in err


def test_other_errors_are_not_taken_for_a_lost_dependency() -> None:
    def body() -> int:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(KafkaException):
        main(body)
