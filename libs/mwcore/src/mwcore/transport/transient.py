"""Kafka errors that pass by themselves (a partition's leader moving to another broker,
a broker restarting, a coordinator loading), and calls tried again through them.

A one-off request to the cluster (a partition's end offset, say) that meets one of
these is asked again, after a short pause, until its deadline: a broker's death must
not stop a worker that merely asked at the wrong moment.

An unknown topic or partition is among them: every caller asks of a partition it has
seen in the cluster's metadata or been assigned, so a broker that does not know it is
one that has not yet learnt of a topic just created (seen on three brokers: a service
that found ``mw.schemas`` just created by another crashed on asking for its end). A
topic really gone is still said, at the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from mwcore.transport.topics import admin_config

T = TypeVar("T")

TRANSIENT = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._WAIT_COORD,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


def is_transient(exc: KafkaException) -> bool:
    err = exc.args[0] if exc.args else None
    return isinstance(err, KafkaError) and (err.code() in TRANSIENT or err.retriable())


def through_transient(call: Callable[[float], T], timeout_s: float, pause_s: float = 0.2) -> T:
    """``call(seconds left)``, asked again while it raises a transient error and time is
    left; the last error otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            if not is_transient(exc) or time.monotonic() + pause_s > deadline:
                raise
        time.sleep(pause_s)


def lost_broker(exc: BaseException) -> bool:
    """Whether ``exc`` is a Kafka error that says the broker did not answer (or moved)."""
    return isinstance(exc, KafkaException) and is_transient(exc)


def cluster_asker(bootstrap: str) -> Callable[[float], None]:
    """A ``DescribeCluster`` of the brokers of ``bootstrap`` through an admin client of
    its own (with the user's client properties; no topic named, none created), bounded
    by the seconds given; raises when there is no answer."""
    admin = AdminClient(admin_config(bootstrap, log_level=0))

    def ask(timeout_s: float) -> None:
        try:
            admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s + 1)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            raise ConnectionError(err.str() if isinstance(err, KafkaError) else str(err)) from None

    return ask
