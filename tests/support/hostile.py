"""What the hostile-input tests share: records written raw to any topic (as anyone who can
write the topic can), the dead letters of a computation by reason, and the rejections a
process counted, from its metrics."""

from __future__ import annotations

import urllib.request
from collections import Counter
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
    records: list[tuple[bytes | None, bytes | None]],
    headers: list[tuple[str, bytes]] | None = None,
    timestamp: int = 0,
    fresh_ids: bool = False,
) -> None:
    """Write ``(key, value)`` records as they are, waiting for the broker; with
    ``fresh_ids`` each gets an ``mw-id`` header of its own (as a foreign producer's
    records would not)."""
    p = Producer(producer_config(bootstrap))
    errors: list[Any] = []
    for key, value in records:
        p.produce(
            topic,
            value,
            key,
            headers=(headers or []) + ([("mw-id", random_id())] if fresh_ids else []),
            timestamp=timestamp,
            on_delivery=lambda err, _m: errors.append(err) if err else None,
        )
    assert p.flush(30) == 0 and not errors, errors


def dead_letter_reasons(bootstrap: str, namespace: str, source: str) -> Counter[str]:
    """How many dead letters ``source`` (a computation or an injector) sent, by reason."""
    msgs = read_topic(bootstrap, topic_name(namespace, f"{source}.dead-letters"))
    return Counter(m.headers.get("mw-reason", b"").decode() for m in {m.id: m for m in msgs}.values())


def rejections(port: int) -> Counter[str]:
    """What a process counted in ``mw_rejected_records_total``, by reason."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "mw_rejected_records_total":
                out[s.labels["reason"]] += int(s.value)
    return out
