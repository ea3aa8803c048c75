"""A sender's ``purge`` (``transport/producer.py``, ``cores/native/sender.py``): what the
Kafka client still holds is reported failed at once, so nothing of it is sent or retried
later (a revocation purges what its drain left unacknowledged: ``runtime/stopping.py``).
The broker is unreachable, so every production stays queued until purged."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError

from mwcore.api.record import ID_HEADER, Production
from mwcore.cores import core
from mwcore.cores.native import installed
from mwcore.transport.producer import Sender

NOWHERE = "127.0.0.1:9"


class Reports:
    """A batch's reports, as either sender gives them."""

    def __init__(self) -> None:
        self.codes: list[int] = []
        self.settled = 0

    def __call__(self, err: Any, msg: Any) -> None:  # confluent-kafka: one per production
        self.codes.append(err.code() if err is not None else 0)

    def settle_all(self, failures: list[Any], ends: dict[Any, int], counts: dict[Any, int]) -> None:
        self.settled += 1
        self.codes += [err.code() for err, *_ in failures]


def _senders() -> list[Any]:
    out: list[Any] = [pytest.param(Sender, id="python")]
    if installed():
        out.append(pytest.param(core("native").sender, id="native"))
    return out


@pytest.mark.parametrize("make", _senders())
def test_purge_reports_what_is_held_as_failed_and_leaves_nothing(make: Any) -> None:
    sender = make(NOWHERE)
    reports = Reports()
    productions = [Production(bytes([i]) * 16, "t", b"k", b"v", int(time.time() * 1000)) for i in range(5)]
    assert sender.send_all(productions, reports, ID_HEADER) == 5
    assert sender.flush(0.2) == 5  # nobody answers: all held
    assert reports.codes == []
    sender.purge()
    assert sender.flush(0) == 0
    assert len(reports.codes) == 5
    assert set(reports.codes) <= {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}
