"""The fault suite's checks: what the outputs and Redis must show after any faults.

Every check counts its violations (0 when the guarantee held):

- ``conflicting_payloads``: output ids carried by two different payloads (any output);
- ``lost_records``: valid, on-time input records with no ``chaos_echo`` output;
- ``duplicate_outputs``: ``chaos_echo`` ids derived from no input record (a record
  processed twice gets a second id only if dedup failed and its sequence moved);
- ``wrong_running_sums``: echo payloads that differ from the running sum and count of
  the key's distinct records in partition order (state lost, repeated or reordered);
- ``wrong_windows``: event-time windows whose count differs from an offline recount,
  or missing, or fired twice;
- ``early_timers``: wall-time timers that fired before they were due;
- ``missing_timers``: wall-time timers set but never fired (or fired twice);
- ``wrong_state``: keys whose final state in Redis differs from the truth;
- ``dead_letters``: dead letters that are not exactly the malformed inputs;
- ``pending_left``: intervals with productions still pending after the drain.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import redis

from mwcore.api import ids
from mwcore.api.record import LATE_HEADER
from mwcore.errors import SerializationError
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.transport.topics import dead_letter_stream, topic_name
from testbed import wire
from testbed.chaos.pipeline import TIMER_EVERY, WINDOW_MS, ChaosCount
from testbed.topics import Msg, read_topic

COMPUTATION = ChaosCount.name
CHECKS = (
    "conflicting_payloads",
    "lost_records",
    "duplicate_outputs",
    "wrong_running_sums",
    "wrong_windows",
    "early_timers",
    "missing_timers",
    "wrong_state",
    "dead_letters",
    "pending_left",
)


@dataclass
class Findings:
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECKS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    timer_lateness_ms: list[int] = field(default_factory=list)
    timer_due_ms: list[int] = field(default_factory=list)  # each firing's due time (wall clock)
    late_inputs: int = 0

    def add(self, check: str, n: int = 1, example: str = "") -> None:
        self.counts[check] += n
        if n and example and len(self.examples[check]) < 3:
            self.examples[check].append(example)

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())


def check(
    stack: wire.Stack, client: redis.Redis, registry: SchemaRegistry, namespace: str, malformed: set[bytes]
) -> Findings:
    f = Findings()
    bootstrap = stack.bootstrap
    topic = lambda stream: topic_name(namespace, stream)  # noqa: E731
    serde = lambda stream, schema: wire.serde(stack, registry, topic(stream), schema)  # noqa: E731
    inputs = read_topic(bootstrap, topic("chaos_in"))
    number = serde("chaos_in", "mw.examples.Number")

    # The truth: each id's first copy, per partition in offset order.
    truth: dict[str, list[tuple[bytes, int]]] = defaultdict(list)  # key -> [(id, n)] in order
    windows: Counter[tuple[str, int]] = Counter()
    seen: set[bytes] = set()
    for m in sorted(inputs, key=lambda m: (m.partition, m.offset)):
        if m.id in seen or m.id in malformed:
            continue
        seen.add(m.id)
        if LATE_HEADER in m.headers:
            f.late_inputs += 1
            continue
        try:
            n = number.decode(m.value)["n"]
        except SerializationError:
            continue
        key = (m.key or b"").decode()
        truth[key].append((m.id, n))
        windows[(key, m.timestamp // WINDOW_MS * WINDOW_MS)] += 1

    streams = ("chaos_echo", "chaos_windows", "chaos_timers", "dead_letters")
    outputs = {
        s: read_topic(bootstrap, topic(dead_letter_stream(COMPUTATION) if s == "dead_letters" else s))
        for s in streams
    }
    by_id: dict[bytes, bytes] = {}
    for msgs in outputs.values():
        for m in msgs:
            prev = by_id.setdefault(m.id, m.value)
            if prev != m.value:
                f.add("conflicting_payloads", example=m.id.hex())
    echo = _decoded(outputs["chaos_echo"], serde("chaos_echo", "mw.bench.ChaosEcho"))
    expected: dict[bytes, tuple[str, int, int, int]] = {}
    final: dict[str, tuple[int, int]] = {}
    for key, records in truth.items():
        total = 0
        for count, (rid, n) in enumerate(records, 1):
            total += n
            expected[ids.derive(rid, 0)] = (key, n, total, count)
        final[key] = (total, len(records))
    for oid, want in expected.items():
        got = echo.get(oid)
        if got is None:
            f.add("lost_records", example=oid.hex())
        elif (got["key"], got["n"], got["total"], got["count"]) != want:
            f.add("wrong_running_sums", example=f"{want} != {got}")
    for oid in echo.keys() - expected.keys():
        f.add("duplicate_outputs", example=oid.hex())

    fired: dict[tuple[str, int], list[int]] = defaultdict(list)
    for v in _decoded(outputs["chaos_windows"], serde("chaos_windows", "mw.bench.ChaosWindow")).values():
        fired[(v["key"], v["start"])].append(v["count"])
    for w in windows.keys() | fired.keys():
        if fired.get(w) != [windows.get(w, 0)]:
            f.add("wrong_windows", example=f"{w}: fired {fired.get(w)}, recount {windows.get(w, 0)}")

    timers: dict[tuple[str, str], int] = Counter()
    for v in _decoded(outputs["chaos_timers"], serde("chaos_timers", "mw.bench.ChaosTimer")).values():
        timers[(v["key"], v["tag"])] += 1
        late = v["fired"] - v["due"]
        if late < 0:
            f.add("early_timers", example=f"{v['key']} {v['tag']} {late} ms")
        f.timer_lateness_ms.append(late)
        f.timer_due_ms.append(v["due"])
    want_timers = {
        (k, f"t{c}") for k, (_, n) in final.items() for c in range(TIMER_EVERY, n + 1, TIMER_EVERY)
    }
    for t in want_timers | timers.keys():
        if timers.get(t) != 1:
            f.add("missing_timers", example=f"{t}: fired {timers.get(t, 0)} times")

    state: dict[str, Any] = {}
    for p in range(ChaosCount.partitions):
        for k, v in client.hgetall(_key(namespace, p, "state")).items():
            state[k.decode()] = json.loads(v)
        if client.hlen(_key(namespace, p, "pending")):
            f.add("pending_left", example=f"interval {p}")
    for key, (total, count) in final.items():
        got = state.get(key, {})
        if (got.get("total"), got.get("count")) != (total, count):
            f.add("wrong_state", example=f"{key}: {got.get('total')}/{got.get('count')} != {total}/{count}")

    dead = {m.headers.get("mw-source-id", b"") for m in outputs["dead_letters"]}
    f.add(
        "dead_letters", len(dead ^ malformed), example=f"{len(dead)} dead letters, {len(malformed)} malformed"
    )
    return f


def _decoded(msgs: list[Msg], serde: AvroSerde) -> dict[bytes, dict[str, Any]]:
    return {m.id: serde.decode(m.value) for m in msgs}


def _key(namespace: str, index: int, suffix: str) -> str:
    return f"mw:{{{namespace}/{COMPUTATION}/{index}}}:{suffix}"
