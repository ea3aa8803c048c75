"""A one-off Kafka request asked again through errors that pass (a leader moving when a
broker dies), and not through the others."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from mwcore.transport.transient import through_transient


def failing(codes: list[int], result: int = 7) -> tuple[list[float], object]:
    asked: list[float] = []

    def call(left: float) -> int:
        asked.append(left)
        if codes:
            raise KafkaException(KafkaError(codes.pop(0)))
        return result

    return asked, call


def test_a_leader_moving_is_asked_again() -> None:
    asked, call = failing([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert through_transient(call, 5.0, pause_s=0.01) == 7  # type: ignore[arg-type]
    assert len(asked) == 3


def test_a_topic_not_yet_known_to_its_leader_is_asked_again() -> None:
    """A topic just created, asked of a broker whose metadata has not caught up."""
    asked, call = failing([KafkaError.UNKNOWN_TOPIC_OR_PART] * 2)
    assert through_transient(call, 5.0, pause_s=0.01) == 7  # type: ignore[arg-type]
    assert len(asked) == 3


def test_an_error_that_does_not_pass_is_raised_at_once() -> None:
    asked, call = failing([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        through_transient(call, 5.0, pause_s=0.01)  # type: ignore[arg-type]
    assert len(asked) == 1


def test_a_transient_error_that_lasts_past_the_deadline_is_raised() -> None:
    asked, call = failing([KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException):
        through_transient(call, 0.2, pause_s=0.05)  # type: ignore[arg-type]
    assert 2 <= len(asked) <= 6
