"""The per-record path of one worker, in-process: no broker, no Redis, none of their
timing noise.

Run: ``.venv/bin/python bench/hotpath.py [--records N] [--workload keyed|windowed] [--floor]
[--effects python|native]``; prints JSON last.

Feeds ``KeyedCount`` (``bench/keyed_count.py``) batches of 5,000 real
``confluent_kafka.Message`` objects (10,000 Zipf-skewed keys, like
``bench/throughput.py``) through ``Interval.process``, ``prepare``, the Redis commit's
argument packing and ``committed``, on the in-memory store, and reports the CPU time
per record. ``--workload windowed`` feeds ``WindowedCount`` (``bench/windowed_count.py``:
a one-second tumbling count per key with event-time timers, 1 ms of event time between
records) instead, and fires the timers the watermark (2 s behind the last record)
passes after each batch. On the native core the messages are the native consumer's
(``rust.Msg``) and the effects of user code run in Rust, as in a worker;
``--effects python`` keeps the reference ``Applier`` (a core of mixed parts:
``mwcore.cores.mixed``). The
messages are built first and kept out of the cycle collector's way
(in a worker they wait in librdkafka's memory, not Python's); the collector is then
tuned as a worker tunes it (``--gc-threshold``, default ``MW_GC_THRESHOLD``'s 50000;
0 leaves Python's default).

Under callgrind the instruction count barely moves from run to run (two identical
runs differed by 0.13%, with ``PYTHONHASHSEED`` fixed), unlike CPU time on a shared
machine. The count per record is the difference of two runs that process different
numbers of records from the same messages, divided by the difference in records
(start-up, building the messages and the warm-up cancel out)::

    export PYTHONHASHSEED=0
    valgrind --tool=callgrind .venv/bin/python bench/hotpath.py --records 10000 --messages 25000
    valgrind --tool=callgrind .venv/bin/python bench/hotpath.py --records 20000 --messages 25000
    # (Collected of the second - Collected of the first) / 10000

``--floor`` runs the same workload's user code on the same messages with nothing of the
kit around it: each value decoded (by the native core's decoder where installed),
a ``Record`` made, ``process_record`` called on a context of plain dicts; the windowed
workload's timers on a ``heapq``, fired as above, each production encoded; each chunk's
dirty state encoded once. That is what any engine running this Python user code
pays per record, whatever it does for exactly-once; ``cpu_us_per_record`` against the
kit's says what the kit adds.

``--codecs`` times the Avro codecs instead: decode of ``mw.bench.Event`` and encode of
``mw.bench.Count``, the generated code (``mwcore.serde.codegen``) against fastavro
(``AvroSerde(..., generated=False)``), and ``resolved_decode_event_us``: a record of a
newer version of ``mw.bench.Event`` (a producer upgraded first: one more field, with a
default) decoded by a reader that has only the older one, through fastavro's schema
resolution; best of 5 ``timeit`` repeats.
"""

from __future__ import annotations

import argparse
import functools
import gc
import heapq
import json
import random
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Message

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.keyed_count import KeyedCount  # noqa: E402
from bench.windowed_count import WindowedCount  # noqa: E402
from mwcore.api.computation import state_codec_of  # noqa: E402
from mwcore.cores import CORES, CoreName, core, default_name, mixed  # noqa: E402
from mwcore.cores.native import rust  # noqa: E402
from mwcore.runtime.config import WorkerConfig  # noqa: E402
from mwcore.runtime.intake import InputBinding  # noqa: E402
from mwcore.runtime.interval import Interval  # noqa: E402
from mwcore.runtime.interval_deps import IntervalDeps  # noqa: E402
from mwcore.serde.avro import AvroSerde, SchemaRegistry  # noqa: E402
from mwcore.store.fast_script import Packed, pack_call  # noqa: E402
from mwcore.store.interface import IntervalId  # noqa: E402
from mwcore.store.memory_store import MemoryCheckpointStore  # noqa: E402

KEYS = 10_000
BATCH = 5_000
T0 = 1_700_000_000_000  # the first record's timestamp (ms)
GC_THRESHOLD = 50_000  # the default of MW_GC_THRESHOLD (mwcore.process.settings.WorkerSettings)


def interval_path(
    registry: SchemaRegistry,
    records: int,
    messages_n: int,
    gc_threshold: int,
    name: CoreName = "python",
    workload: str = "keyed",
    effects: CoreName | None = None,  # None: as the core
) -> dict[str, Any]:
    windowed = workload == "windowed"
    comp = WindowedCount() if windowed else KeyedCount()
    codec = state_codec_of(comp)
    codec.bind(registry)
    store = MemoryCheckpointStore()
    iv = IntervalId("bench", comp.name, 0)
    output = "windows" if windowed else "counts"
    event = AvroSerde(registry, "mw.bench.Event")
    out = AvroSerde(registry, "mw.bench.ChaosWindow" if windowed else "mw.bench.Count")
    parts = core(name) if effects in (None, name) else mixed(core(name), effects=core(effects))
    deps = IntervalDeps(
        computation=comp,
        store=store,
        core=parts,
        config=WorkerConfig(bootstrap="127.0.0.1:9", witness_gate=False, whole_state_mb=0),
        codec=codec,
        inputs={"events": InputBinding("events", event, parts.decoder(event))},
        encoders={output: (output, parts.encoder(out))},
        dead_letter_topic="dead-letters",
    )
    token = store.grant(iv, "bench")
    interval = Interval(iv, store.recover(iv, token), deps)
    encode = AvroSerde(registry, "mw.bench.Event").encode
    rng = random.Random(1)
    weights = [1 / (i + 1) ** 1.1 for i in range(KEYS)]
    keys = rng.choices([f"query-{i}" for i in range(KEYS)], weights, k=messages_n)
    make: Any = rust.Msg if name == "native" else Message  # the consumer's messages
    messages = [
        make(
            topic="events",
            partition=0,
            offset=i,
            key=k.encode(),
            value=encode({"query": k, "lang": "en", "latency_us": i % 997}),
            headers=[("mw-id", rng.randbytes(16))],
            timestamp=(1, T0 + i),
        )
        for i, k in enumerate(keys)
    ]
    gc.collect()
    gc.freeze()
    if gc_threshold > 0:
        from mwcore.runtime.runner import tune_gc

        tune_gc(gc_threshold)

    pack = parts.packer()

    def run(batch: list[Any]) -> None:
        for b in range(0, len(batch), BATCH):
            chunk = batch[b : b + BATCH]
            interval.process(chunk)
            if windowed:  # the watermark 2 s behind the chunk's last record
                interval.fire_timers(chunk[-1].timestamp()[1] - 2_000, 0, 1_000_000)
            ready = interval.prepare()
            assert ready is not None
            cp = ready.checkpoint
            packed = pack("0" * 40, [], token, True, cp)  # as the store sends it
            if not isinstance(packed, Packed):
                pack_call("0" * 40, (), packed)
            interval.committed(ready, store.commit(iv, interval.token, ready.checkpoint))
            interval.take_to_send()

    return {
        "records": records,
        "gc_threshold": gc_threshold,
        "core": name,
        "workload": workload,
        "effects": effects or name,
        "cpu_us_per_record": _cpu_us_per_record(lambda batch, _: run(batch), messages, records),
    }


def codecs(registry: SchemaRegistry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, generated in (("generated", True), ("fastavro", False)):
        dec = AvroSerde(registry, "mw.bench.Event", generated=generated)
        enc = AvroSerde(registry, "mw.bench.Count", generated=generated)
        data = dec.encode({"query": "query-17", "lang": "en", "latency_us": 123})
        out[f"{label}_decode_event_us"] = _best_us(functools.partial(dec.decode, data))
        out[f"{label}_encode_count_us"] = _best_us(functools.partial(enc.encode, {"count": 42}))
    newer = SchemaRegistry.from_directory(ROOT / "schemas")
    v1 = registry.latest("mw.bench.Event").document
    v2 = {**v1, "version": 2, "fields": [*v1["fields"], {"name": "region", "type": "string", "default": ""}]}
    writer = AvroSerde(newer, newer.add(v2).name)
    registry.add_writer(newer.latest("mw.bench.Event").document)  # as read from the schemas topic
    data = writer.encode({"query": "query-17", "lang": "en", "latency_us": 123, "region": "eu"})
    reader = AvroSerde(registry, "mw.bench.Event")
    assert reader.decode(data) == {"query": "query-17", "lang": "en", "latency_us": 123}
    out["resolved_decode_event_us"] = _best_us(functools.partial(reader.decode, data))
    return out


class _State:
    """``ctx.state`` on a dict of every key's value; the keys set are dirty."""

    __slots__ = ("dirty", "key", "values")

    def __init__(self) -> None:
        self.key, self.values, self.dirty = "", {}, set()  # type: ignore[var-annotated]

    def get(self) -> Any:
        return self.values.get(self.key)

    def set(self, value: Any) -> None:
        self.values[self.key] = value
        self.dirty.add(self.key)


class _Context:
    """``ctx`` as the workloads use it: ``key``, ``state``, ``timers.set``, ``produce``."""

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self.key = ""
        self.state = _State()
        self.timers = self
        self.due: list[tuple[int, str, str]] = []  # (timestamp, key, tag), a heap
        self.out: list[tuple[str, bytes, int]] = []
        self._encode = encode

    def set(self, tag: str, timestamp: int, domain: Any) -> None:
        heapq.heappush(self.due, (timestamp, self.key, tag))

    def produce(self, stream: str, value: Any, timestamp: int) -> None:
        self.out.append((self.key, self._encode(value), timestamp))


def floor(
    registry: SchemaRegistry, records: int, messages_n: int, name: CoreName, workload: str
) -> dict[str, Any]:
    """The workload's user code alone on the same messages (``--floor``)."""
    from mwcore.api.record import Record, TimeDomain, Timer

    windowed = workload == "windowed"
    comp = WindowedCount() if windowed else KeyedCount()
    codec = state_codec_of(comp)
    codec.bind(registry)
    event = AvroSerde(registry, "mw.bench.Event")
    out = AvroSerde(registry, "mw.bench.ChaosWindow" if windowed else "mw.bench.Count")
    decode = core(name).decoder(event)
    ctx = _Context(core(name).encoder(out))
    state, due = ctx.state, ctx.due
    rng = random.Random(1)
    weights = [1 / (i + 1) ** 1.1 for i in range(KEYS)]
    keys = rng.choices([f"query-{i}" for i in range(KEYS)], weights, k=messages_n)
    messages = [
        (k.encode(), event.encode({"query": k, "lang": "en", "latency_us": i % 997}), T0 + i, rid)
        for i, (k, rid) in enumerate(zip(keys, (rng.randbytes(16) for _ in keys), strict=False))
    ]
    new_record = tuple.__new__
    encode_state = codec.encode

    def run(batch: list[Any], first: int) -> None:
        for b in range(0, len(batch), BATCH):
            chunk = batch[b : b + BATCH]
            for i, (raw_key, raw_value, ts, rid) in enumerate(chunk, first + b):
                key = raw_key.decode()
                record = new_record(Record, (key, decode(raw_value), ts, rid, "events", 0, i))
                ctx.key = state.key = key
                comp.process_record(ctx, record)  # type: ignore[arg-type]
            if windowed:  # the watermark 2 s behind the chunk's last record
                watermark = chunk[-1][2] - 2_000
                while due and due[0][0] <= watermark:
                    ts, key, tag = heapq.heappop(due)
                    ctx.key = state.key = key
                    comp.process_timer(ctx, Timer(key, tag, ts, TimeDomain.EVENT))  # type: ignore[arg-type]
            for key in state.dirty:
                encode_state(state.values[key])
            state.dirty.clear()
            ctx.out.clear()

    gc.collect()
    gc.freeze()
    from mwcore.runtime.runner import tune_gc

    tune_gc(GC_THRESHOLD)  # as the kit's path runs here, and a worker by default
    return {
        "records": records,
        "floor": True,
        "core": name,
        "workload": workload,
        "cpu_us_per_record": _cpu_us_per_record(run, messages, records),
    }


def _cpu_us_per_record(run: Callable[[list[Any], int], None], messages: list[Any], records: int) -> float:
    """CPU time per record of ``run(batch, index of its first message)`` over ``records``
    messages, after a batch of warm-up (state cached, codecs built)."""
    run(messages[:BATCH], 0)
    start = time.process_time()
    run(messages[BATCH : BATCH + records], BATCH)
    return round(1e6 * (time.process_time() - start) / records, 2)


def _best_us(call: Callable[[], object], number: int = 100_000) -> float:
    """Microseconds per call, the best of 5 ``timeit`` repeats."""
    return round(1e6 * min(timeit.repeat(call, number=number, repeat=5)) / number, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records timed (after 5,000 of warm-up)")
    parser.add_argument(
        "--messages", type=int, default=0, help="messages to build (default: records + 5,000; at least that)"
    )
    parser.add_argument(
        "--gc-threshold", type=int, default=GC_THRESHOLD, help="as MW_GC_THRESHOLD (0: Python's)"
    )
    parser.add_argument("--codecs", action="store_true", help="time the Avro codecs instead")
    parser.add_argument("--floor", action="store_true", help="the workload's user code alone")
    parser.add_argument("--core", choices=CORES, default=default_name(), help="as MW_CORE")
    parser.add_argument("--workload", choices=("keyed", "windowed"), default="keyed")
    parser.add_argument("--effects", choices=CORES, help="the applier's core (default: the core's)")
    args = parser.parse_args()
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    messages_n = max(args.messages, args.records + BATCH)
    if args.codecs:
        result = codecs(registry)
    elif args.floor:
        result = floor(registry, args.records, messages_n, args.core, args.workload)
    else:
        result = interval_path(
            registry, args.records, messages_n, args.gc_threshold, args.core, args.workload, args.effects
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
