"""What the hostile-input tests and ``bench/hostile.py`` share: records written raw to any
topic (as anyone who can write the topic can), the dead letters of a computation by
reason, and the rejections a process counted, from its metrics."""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Sequence
from functools import partial
from typing import Any

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from mwcore.api.ids import random_id
from mwcore.transport.topics import producer_config, topic_name
from testbed.topics import read_topic

SECRET = "the pipeline secret of the hostile tests"


def produce_raw(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
    timestamp: int = 0,
    fresh_ids: bool = False,
) -> list[tuple[int, int]]:
    """Write ``(key, value)`` records as they are, waiting for the broker; with
    ``fresh_ids`` each gets an ``mw-id`` header of its own (as a foreign producer's
    records would not). Where each went: (partition, offset), in order."""
    p = Producer(producer_config(bootstrap))
    errors: list[Any] = []
    placed: dict[int, tuple[int, int]] = {}

    def delivered(i: int, err: Any, msg: Any) -> None:
        if err:
            errors.append(err)
        else:
            placed[i] = (msg.partition(), msg.offset())

    for i, (key, value) in enumerate(records):
        p.produce(
            topic,
            value,
            key,
            headers=(headers or []) + ([("mw-id", random_id())] if fresh_ids else []),
            timestamp=timestamp,
            on_delivery=partial(delivered, i),
        )
    assert p.flush(30) == 0 and not errors, errors
    return [placed[i] for i in range(len(records))]


def dead_letter_reasons(bootstrap: str, namespace: str, source: str) -> Counter[str]:
    """How many dead letters ``source`` (a computation or an injector) sent, by reason."""
    msgs = read_topic(bootstrap, topic_name(namespace, f"{source}.dead-letters"))
    return Counter(m.headers.get("mw-reason", b"").decode() for m in {m.id: m for m in msgs}.values())


def samples(port: int, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric ``name`` a process serves (labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return [
        (s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def rejections(port: int, topic: str | None = None) -> Counter[str]:
    """What a process counted in ``mw_rejected_records_total``, by reason (of ``topic``
    only, if given)."""
    out: Counter[str] = Counter()
    for labels, value in samples(port, "mw_rejected_records_total"):
        if topic in (None, labels["topic"]):
            out[labels["reason"]] += int(value)
    return out


def records_in(port: int) -> int:
    """The input records a worker processed (``mw_records_in_total``)."""
    return sum(int(v) for _, v in samples(port, "mw_records_in_total"))
