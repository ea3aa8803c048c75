"""Injectors: processes that bring records into the pipeline and report their own
low watermark (paper section 7.2, figure 10).

An injector is one of an expected set of processes (``index`` of ``processes``); the
authority's watermark for it is the minimum over all of them, so a process that is
missing holds the watermark at its last value. Each process has a token, granted like
an interval's, so a replaced process's reports are rejected.

``advance(w)`` promises that no more records older than ``w`` will be sent (for
example: the oldest unfinished input file). A record sent older than what was
already reported is *late*: it carries the ``mw-late-ms`` header, is left out of the
backlog accounting (it cannot hold any watermark) and meets each consumer's late
policy. Records in flight and acknowledged-but-unreported hold the reported value down
exactly as a computation's productions do.

Skew limit (paper 8.4): ``hold_for_skew(ts)`` blocks while ``ts`` is more than
``skew_ms`` ahead of a downstream computation's input watermark.

What cannot become a record goes to ``<name>.dead-letters`` with the reason
(``mw-error``, ``mw-reason``), never out of ``send`` as an error: a value the writer
schema cannot encode, a key or timestamp out of the kit's bounds (``limits.py``), a
record the broker refuses for good (too large, a timestamp too far ahead: sent again
it would hold the watermark for ever). The broker refuses a whole request for one such
record, so a refused record is first sent once more alone (its batchmates were not at
fault): only one refused alone is a dead letter. With a pipeline secret
(``api/signing.py``) every record id it sends carries its MAC.

A delivery report carries no headers, so each record's headers (its id) travel with
its delivery callback: a record sent again keeps its id.

``send`` polls the producer (delivery reports, retries, a report due) only every
``POLL_EVERY`` sends: a source that sends and then waits calls ``advance``, ``poll``
or ``flush`` as it goes, as the query-log reader and ``mw replay`` do.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Mapping
from typing import Any

from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.record import ID_HEADER, LATE_HEADER
from mwcore.api.signing import MAC_HEADER, UNSIGNED, Signer
from mwcore.errors import FencedError, SerializationError
from mwcore.injector.state import InjectorState
from mwcore.limits import MAX_DEAD_LETTER_BYTES, MAX_KEY_BYTES, MAX_TIMESTAMP, MIN_TIMESTAMP
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import DEFAULT_WIRE, Wire
from mwcore.store.client import RedisClient
from mwcore.store.report_sink import RedisReportSink
from mwcore.transport.producer import Sender, refused_for_good
from mwcore.transport.schema_registry import RegistryClient, registered_framings
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import (
    dead_letter_stream,
    end_offsets,
    ensure_topics,
    topic_name,
)
from mwcore.transport.watermark_topic import WatermarkFeed
from mwcore.watermarks.report_format import NodeSpec, Report, Segment

Headers = list[tuple[str, str | bytes | None]]
# sends between two polls of the producer (delivery reports, retries, a report due): a
# poll per record cost as much as encoding it; librdkafka sends without being polled
POLL_EVERY = 64
# the producer's linger.ms (MW_INJECTOR_LINGER_MS): an injector sends in bursts (a file,
# a batch of input), where 20 ms makes fewer, fuller requests than 5 ms did (a third
# less of the broker's CPU per record, bench/injector.py), for a delay that a
# watermark moving a second at a time does not see
LINGER_MS = 20
Unsent = tuple[int | None, int, Headers, Any]


class Injector:
    def __init__(
        self,
        *,
        bootstrap: str,
        client: RedisClient,
        registry: SchemaRegistry,
        name: str,
        outputs: Mapping[str, str | None],  # stream -> Avro schema (None: sent encoded)
        namespace: str = "default",
        index: int = 0,
        processes: int = 1,
        partitions: int = 4,
        report_interval_ms: int = 100,
        skew_ms: int | None = None,
        skew_of: str | None = None,  # computation whose input watermark bounds the skew
        linger_ms: int = LINGER_MS,
        schemas: SchemaTopic | None = None,  # where start() publishes the writer schemas
        signer: Signer = UNSIGNED,  # MW_ID_SECRET: record ids signed
        wire: Wire = DEFAULT_WIRE,  # the framing of what it writes (serde/framing.py)
        schema_registry: RegistryClient | None = None,  # where start() registers them, if "confluent"
    ) -> None:
        self._signer = signer
        if not 0 <= index < processes:
            raise ValueError(f"injector process index {index} not in 0..{processes - 1}")
        self.name = name
        self.namespace = namespace
        self.index = index
        self.processes = processes
        self._bootstrap = bootstrap
        self._state = InjectorState(client, namespace, name, index)
        self._sink = RedisReportSink(client, namespace)
        self._registry = registry
        self._serdes = {s: AvroSerde(registry, schema) for s, schema in outputs.items() if schema}
        self.schemas = schemas or SchemaTopic(bootstrap, namespace)
        self.wire = wire
        self.schema_registry = schema_registry
        self._topics = {s: topic_name(namespace, s) for s in outputs}
        self.dead_letter_topic = topic_name(namespace, dead_letter_stream(name))
        self._partitions = partitions
        self._report_every = report_interval_ms / 1000
        self._sender = Sender(bootstrap, **{"linger.ms": linger_ms})
        self.token = ""
        self.wanted = MIN_WATERMARK  # what advance() asked for
        self.reported = MIN_WATERMARK  # the promise made to the authority
        self._inflight: dict[int, int] = {}  # send seq -> timestamp (non-late records)
        self._seq = itertools.count()
        self._acked: dict[tuple[str, int], list[int]] = {}  # (topic, part) -> [end, min ts, n]
        self._next_report = 0.0
        self.sent = 0
        self.late = 0
        self.errors = 0
        self.dead_letters = 0
        self.skew_ms = skew_ms
        self.skew_of = skew_of
        self._feed: WatermarkFeed | None = None
        # (seq or None if late, timestamp, headers, reported message): failed, to send again
        self._retry: list[Unsent] = []
        self._alone: list[Unsent] = []  # refused for good in a batch: to send alone

    def _register(self) -> None:
        """Register the writer schemas under their topics' subjects and write with the
        ids (``ConfigError``, nothing registered, if one is refused)."""
        schemas = {self._topics[s]: serde.schema for s, serde in self._serdes.items()}
        wires: dict[str, tuple[Wire, Wire | None]] = dict.fromkeys(schemas, ("confluent", None))
        framings = registered_framings(self.name, self.schema_registry, wires, schemas)
        self._serdes = {
            s: AvroSerde(self._registry, serde.schema.name, framing=framings[self._topics[s]])
            for s, serde in self._serdes.items()
        }

    def start(self) -> None:
        """Publish the writer schemas (``ConfigError`` if one is incompatible with an
        earlier version), declare, take this process's token, and pick up where a former
        run of it left off: its promise (so what it promised stays late) and, as segments
        up to the partitions' current ends, whatever it may have had in flight when it
        stopped."""
        topics = {t: self._partitions for t in self._topics.values()}
        ensure_topics(self._bootstrap, {**topics, self.dead_letter_topic: 1})
        if self.wire == "confluent":
            self._register()
        self.schemas.publish([serde.schema for serde in self._serdes.values()])
        outputs = (*self._topics.values(), self.dead_letter_topic)
        spec = NodeSpec(self.name, "injector", (), outputs, self.processes)
        self._sink.declare(spec)
        self.token = self._state.grant(f"injector-{self.index}")
        promised = self._state.promise()
        if promised is not None:
            self.reported = self.wanted = promised
            for (topic, part), end in end_offsets(self._bootstrap, topics).items():
                if end > 0:
                    self._acked[(topic, part)] = [end, self.reported, 1]

    # -- progress ------------------------------------------------------------------------

    def finished(self) -> set[str]:
        """What this injector process recorded as done (``finish``), across restarts:
        the source's own progress (files read, say), kept beside its promises."""
        return self._state.finished()

    def finish(self, item: str) -> None:
        """Record ``item`` as done: call it once what it sent is acknowledged (``flush``)."""
        self._state.finish(item)

    # -- sending -------------------------------------------------------------------------

    def send(self, stream: str, key: str, value: Any, timestamp: int, record_id: bytes | None = None) -> bool:
        """Send one record; True if it went out late (behind the reported watermark). A
        value the stream's schema cannot encode is a dead letter."""
        rid = record_id or ids.random_id()
        try:
            data = self._serdes[stream].encode(value)
        except SerializationError as exc:
            self.dead_letter(repr(value).encode(), str(exc), rid, reason="unencodable", stream=stream)
            return False
        return self.send_encoded(stream, key.encode(), data, timestamp, rid)

    def send_encoded(
        self,
        stream: str,
        key: bytes | None,
        data: bytes,
        timestamp: int,
        record_id: bytes | None = None,
        late_ms: int | None = None,
    ) -> bool:
        """Send an already encoded record; ``late_ms`` sends it late whatever the
        watermark (a replay keeps what was late in the original late)."""
        rid = record_id or ids.random_id()
        topic = self._topics[stream]
        if key is not None and len(key) > MAX_KEY_BYTES:
            why = f"key of {len(key)} bytes, more than {MAX_KEY_BYTES}"
            self.dead_letter(data, why, rid, reason="key_too_long", stream=stream)
            return False
        if not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
            why = f"timestamp {timestamp} outside {MIN_TIMESTAMP} to {MAX_TIMESTAMP}"
            self.dead_letter(data, why, rid, reason="bad_timestamp", stream=stream)
            return False
        headers = self._id_headers(rid, topic, key, data)
        late = timestamp < self.reported or late_ms is not None
        if late:
            behind = late_ms if late_ms is not None else self.reported - timestamp
            headers.append((LATE_HEADER, str(behind).encode()))
            self.late += 1
            callback = functools.partial(self._on_delivery, None, timestamp, headers)
        else:
            seq = next(self._seq)
            self._inflight[seq] = timestamp
            callback = functools.partial(self._on_delivery, seq, timestamp, headers)
        self._sender.send(topic, data, key, timestamp=timestamp, headers=headers, on_delivery=callback)
        self.sent += 1
        if not self.sent % POLL_EVERY:
            self.poll()
        return late

    def _id_headers(self, record_id: bytes, topic: str, key: bytes | None, value: bytes) -> Headers:
        headers: Headers = [(ID_HEADER, record_id)]
        if self._signer.enabled:
            headers.append((MAC_HEADER, self._signer.sign_record(record_id, topic, key, value)))
        return headers

    def dead_letter(
        self, value: bytes, error: str, record_id: bytes, reason: str = "malformed", **source: str
    ) -> None:
        """Send input that cannot become a record to ``<name>.dead-letters`` with the
        error (header ``mw-error``), a short ``reason`` (``mw-reason``) and where it came
        from (``mw-source-<name>``); a value past ``MAX_DEAD_LETTER_BYTES`` is cut
        (``mw-truncated``)."""
        if len(value) > MAX_DEAD_LETTER_BYTES:
            cut = [("mw-truncated", f"value {len(value)} bytes".encode())]
            value = value[:MAX_DEAD_LETTER_BYTES]
        else:
            cut = []
        headers = self._id_headers(record_id, self.dead_letter_topic, None, value) + cut
        headers += [("mw-error", error.encode()[:4000]), ("mw-reason", reason.encode())]
        headers += [(f"mw-source-{k}", v.encode()[:1024]) for k, v in source.items()]
        self.dead_letters += 1
        self._sender.send(
            self.dead_letter_topic, value, None, headers=headers, on_delivery=self._on_dead_letter
        )

    def _on_delivery(self, seq: int | None, ts: int, headers: Headers, err: Any, msg: Any) -> None:
        """A record's delivery report (``seq`` None: sent late, it holds no watermark)."""
        if err is None:
            self._delivered(seq, ts, msg)
            return
        self.errors += 1
        if refused_for_good(err) is not None:
            self._alone.append((seq, ts, headers, msg))  # its batchmate's fault, or its own?
        else:  # stays in flight (holding the watermark) and is sent again, same id
            self._retry.append((seq, ts, headers, msg))

    def _delivered(self, seq: int | None, ts: int, msg: Any) -> None:
        if seq is None:
            return
        del self._inflight[seq]
        k = (msg.topic(), msg.partition())
        seg = self._acked.get(k)
        end = msg.offset() + 1
        if seg is None:
            self._acked[k] = [end, ts, 1]
        else:
            seg[0] = max(seg[0], end)
            seg[1] = min(seg[1], ts)
            seg[2] += 1

    def _on_dead_letter(self, err: Any, msg: Any) -> None:
        if err is not None:  # (bounded in size and stamped now: never refused for good)
            self.errors += 1

    def _send_alone(self) -> None:
        """Send each record refused for good in a batch once more in a request of its own:
        refused alone, it is a dead letter (and holds nothing); else it is written."""
        alone, self._alone = self._alone, []
        for seq, ts, headers, msg in alone:
            err, sent = self._sender.send_alone(
                msg.topic(), msg.value(), msg.key(), timestamp=ts, headers=headers
            )
            if err is None:
                self._delivered(seq, ts, sent)
                continue
            why = refused_for_good(err)
            if why is None:
                self._retry.append((seq, ts, headers, msg))
                continue
            if seq is not None:
                del self._inflight[seq]
            self._refused(msg.topic(), msg.value(), ts, headers, why, str(err))

    def _refused(
        self, topic: str, value: bytes | None, ts: int, headers: Headers, why: str, error: str
    ) -> None:
        """A record the broker refuses for good, alone: its dead letter (the value too,
        unless it is what was too large)."""
        rid = (
            next((v for n, v in headers if n == ID_HEADER and isinstance(v, bytes)), None) or ids.random_id()
        )
        self.dead_letter(
            b"" if why == "too_large" else (value or b""),
            f"refused by the broker for good: {error}",
            ids.derive(rid, 0xFFFF_FFFF),
            reason=f"refused_{why}",
            topic=topic,
            timestamp=str(ts),
        )

    # -- watermark -----------------------------------------------------------------------

    def advance(self, watermark: int) -> None:
        """Promise: no more records older than ``watermark`` (except late ones)."""
        self.wanted = max(self.wanted, watermark)
        self.poll()

    def poll(self) -> None:
        self._sender.poll(0)
        if self._alone:
            self._send_alone()
        if self._retry:
            self._resend()
        if time.monotonic() >= self._next_report:
            self.report()

    def _resend(self) -> None:
        retry, self._retry = self._retry, []
        for seq, ts, headers, msg in retry:
            callback = functools.partial(self._on_delivery, seq, ts, headers)
            self._sender.send(
                msg.topic(), msg.value(), msg.key(), timestamp=ts, headers=headers, on_delivery=callback
            )

    def report(self) -> None:
        self._sender.poll(0)
        self._next_report = time.monotonic() + self._report_every
        acked, self._acked = self._acked, {}
        oldest = min(self.wanted, min(self._inflight.values(), default=MAX_WATERMARK))
        oldest = max(oldest, self.reported)  # in flight below the promise: sent late, not counted
        segments = tuple(Segment(t, p, end, ts, n) for (t, p), (end, ts, n) in acked.items())
        r = Report(self.index, self.token, oldest, {}, segments, time.time_ns() // 1_000_000)
        fenced: FencedError | None = None
        try:
            if oldest > self.reported:  # stored first: a restart never forgets a promise
                try:
                    self._state.promise_fenced(self.token, oldest)
                except FencedError as exc:
                    # Replaced by a newer process: still hand over what this one wrote
                    # (the authority keeps a stale report's segments, nothing else).
                    fenced = exc
            self._sink.send(self.name, [r])
        except Exception:
            for k, v in acked.items():  # hand them over next time
                self._acked.setdefault(k, v)
            raise
        if fenced is not None:
            raise fenced
        self.reported = oldest

    def flush(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        left = self._sender.flush(timeout)
        while (self._retry or self._alone) and time.monotonic() < deadline:  # failed ones go again
            self._send_alone()
            self._resend()
            left = self._sender.flush(max(0.0, deadline - time.monotonic()))
        if left or self._retry or self._alone:
            raise RuntimeError(f"injector {self.name}: {left} records unsent after {timeout}s")
        self.report()

    # -- skew ----------------------------------------------------------------------------

    def hold_for_skew(self, timestamp: int, timeout: float = 60.0) -> float:
        """Block while ``timestamp`` is more than ``skew_ms`` ahead of the ``skew_of``
        computation's input watermark; returns the seconds spent waiting."""
        if self.skew_ms is None or self.skew_of is None:
            return 0.0
        if self._feed is None:
            self._feed = WatermarkFeed(self._bootstrap, self.namespace, self._signer)
        start = time.monotonic()
        while True:
            self._feed.poll()
            wm = self._feed.get(self.skew_of)
            if wm is not None and timestamp - wm.input <= self.skew_ms:
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{self.skew_of} stayed more than {self.skew_ms} ms behind {timestamp}")
            self.poll()
            time.sleep(0.01)

    def close(self) -> None:
        self.flush()
        if self._feed is not None:
            self._feed.close()
        self.schemas.close()
