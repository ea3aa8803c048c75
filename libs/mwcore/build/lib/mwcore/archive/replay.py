"""Backfill by replay: archived records of a stream, re-injected into a namespace.

``mw replay --stream queries --from T1 --to T2 --namespace backfill`` reads the
records of ``queries`` with event times in ``[T1, T2)`` from the live namespace and
sends them, with their own record ids, into ``backfill.queries`` through an injector
(``replay-<stream>``) of the ``backfill`` namespace. A copy of the pipeline run with
``MW_NAMESPACE=backfill`` (its own topics, consumer groups and Redis keys) processes
them exactly once, beside the live pipeline and without touching it.

The replay's low watermark follows its progress exactly: a first pass over the range
notes, per partition and block of offsets, the oldest timestamp in that block and all
later ones; while sending, the watermark is the least of these over the records not
sent yet, so no replayed record is late (a record that was late in the original is
sent late again, as the live pipeline saw it). At the end the watermark goes to
``T2``. Run again (after a crash, say), the replay sends the same ids: what it had
sent and promised is sent late this time, and the copy's computations drop what they
have already seen (a repeat shows at most in their late streams); what it had not
sent yet goes out as the first time.

Records are sent as they were encoded, so their writer schemas go with them: the
first record of each writer schema is preceded by that schema, copied to the target
namespace's schemas topic (from the reader's directory, else from the source
namespace's schemas topic), so that the copy's readers can resolve it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from mwcore.api import ids
from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.record import ID_HEADER, LATE_HEADER
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.errors import ConfigError
from mwcore.injector.injector import Injector
from mwcore.serde.avro import SchemaRegistry, SchemaVersion, writer_fingerprint
from mwcore.store.client import RedisClient
from mwcore.transport.archive import Range, Slice, plan, read_slices
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.transport.topics import partition_counts, topic_name

BLOCK = 10_000  # offsets per block of the first pass


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time (UTC unless it says)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


@dataclass(frozen=True)
class Progress:
    sent: int
    total: int
    watermark: int
    elapsed_s: float


@dataclass
class _Partition:
    piece: Slice
    blocks: list[tuple[int, int]]  # (end offset, oldest timestamp from this block on)
    at: int = 0  # the block of the next offset to send
    done: bool = False

    def floor(self) -> int:
        """No record left to send in this partition is older than this."""
        if self.done or self.at >= len(self.blocks):
            return MAX_WATERMARK
        return self.blocks[self.at][1]

    def passed(self, offset: int) -> None:
        while self.at < len(self.blocks) and offset >= self.blocks[self.at][0]:
            self.at += 1


def _late_ms(headers: list[tuple[str, bytes | None]]) -> int | None:
    for k, v in headers:
        if k == LATE_HEADER:
            try:
                return int(v or b"0")
            except ValueError:
                return 0
    return None


class _SchemaCopier:
    """Publishes the writer schema of each record's value to the target namespace before
    the first record that uses it."""

    def __init__(self, registry: SchemaRegistry, source: SchemaTopic, target: SchemaTopic) -> None:
        self.registry, self.source, self.target = registry, source, target
        self.done: set[int] = set()

    def before(self, value: bytes) -> None:
        fp = writer_fingerprint(value)
        if fp is None:
            return
        if fp in self.done:
            return
        self.done.add(fp)
        sv: SchemaVersion | None = self.registry.by_fingerprint(fp) if self.registry.knows(fp) else None
        if sv is None:
            document = self.source.lookup(fp)
            if document is None:
                return  # unknown there too: its readers dead-letter it, as in the source
            sv = SchemaRegistry().add_writer(document, fp)
        self.target.publish([sv], check=False)  # accepted where it was written


class Replay:
    def __init__(
        self,
        *,
        bootstrap: str,
        client: RedisClient,
        registry: SchemaRegistry,
        stream: str,
        namespace: str,
        source_namespace: str = "default",
        from_ms: int | None = None,
        to_ms: int | None = None,
        block: int = BLOCK,
        signer: Signer = UNSIGNED,  # MW_ID_SECRET: the replayed ids signed again with it
    ) -> None:
        self.signer = signer
        if namespace == source_namespace:
            raise ConfigError(
                f"replaying {stream} into {namespace!r}, the namespace it comes from, would feed the "
                "live pipeline its past again: pick another --namespace"
            )
        if from_ms is not None and to_ms is not None and to_ms <= from_ms:
            raise ConfigError(f"--to ({to_ms}) must be after --from ({from_ms})")
        self.bootstrap, self.client, self.registry = bootstrap, client, registry
        self.stream, self.namespace, self.source = stream, namespace, source_namespace
        self.range = Range(from_ms=from_ms, to_ms=to_ms)
        self.block = block
        self.total = 0
        self.max_ts: int | None = None
        self._parts: dict[tuple[str, int], _Partition] = {}

    def scan(self) -> int:
        """First pass: how many records, and the oldest timestamp from each block on."""
        pieces = plan(self.bootstrap, [self.stream], self.range, self.source, split=2**62)
        oldest: dict[tuple[str, int], dict[int, int]] = {}
        keeps = self.range.keeps

        def note(piece: Slice, m: object) -> None:
            ts = m.timestamp()[1]  # type: ignore[attr-defined]
            if not keeps(ts):
                return
            self.total += 1
            self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)
            if _late_ms(list(m.headers() or [])) is not None:  # type: ignore[attr-defined]
                return  # late: holds no watermark
            b = (m.offset() - piece.start) // self.block  # type: ignore[attr-defined]
            blocks = oldest.setdefault((piece.topic, piece.partition), {})
            blocks[b] = min(ts, blocks.get(b, MAX_WATERMARK))

        read_slices(self.bootstrap, pieces, note)
        for piece in pieces:
            found = oldest.get((piece.topic, piece.partition), {})
            n_blocks = -(-piece.size // self.block)
            suffix, running = [], MAX_WATERMARK
            for b in reversed(range(n_blocks)):
                running = min(running, found.get(b, MAX_WATERMARK))
                suffix.append((piece.start + (b + 1) * self.block, running))
            self._parts[(piece.topic, piece.partition)] = _Partition(piece, suffix[::-1])
        return self.total

    def watermark(self) -> int:
        return min((p.floor() for p in self._parts.values()), default=MAX_WATERMARK)

    def run(self, on_progress: Callable[[Progress], None] | None = None) -> dict[str, object]:
        """Second pass: send every record of the range, the watermark following."""
        if not self._parts:
            self.scan()
        topic = topic_name(self.source, self.stream)
        counts = partition_counts(self.bootstrap, [topic])
        inj = Injector(
            bootstrap=self.bootstrap,
            client=self.client,
            registry=self.registry,
            name=f"replay-{self.stream}",
            outputs={self.stream: None},
            namespace=self.namespace,
            partitions=counts.get(topic, 4),
            signer=self.signer,
        )
        inj.start()
        copier = _SchemaCopier(self.registry, SchemaTopic(self.bootstrap, self.source), inj.schemas)
        start = time.monotonic()
        sent = late = 0
        keeps = self.range.keeps
        next_tick = 0.0
        # The final promise: the end of the range (records past it are not replayed, so
        # the partitions' tails must not carry the watermark beyond it).
        end = self.range.to_ms if self.range.to_ms is not None else (self.max_ts or 0) + 1

        def send(piece: Slice, m: object) -> None:
            nonlocal sent, late
            part = self._parts[(piece.topic, piece.partition)]
            offset = m.offset()  # type: ignore[attr-defined]
            ts = m.timestamp()[1]  # type: ignore[attr-defined]
            if keeps(ts):
                headers = list(m.headers() or [])  # type: ignore[attr-defined]
                rid = next((v for k, v in headers if k == ID_HEADER and v), None)
                if rid is None or len(rid) != ids.ID_BYTES:  # as the runtime names such a record
                    rid = ids.from_position(piece.topic, piece.partition, offset)
                late_ms = _late_ms(headers)
                late += late_ms is not None
                value = m.value() or b""  # type: ignore[attr-defined]
                copier.before(value)
                inj.send_encoded(self.stream, m.key(), value, ts, rid, late_ms)  # type: ignore[attr-defined]
                sent += 1
            part.passed(offset + 1)
            tick()

        def finished(piece: Slice) -> None:
            self._parts[(piece.topic, piece.partition)].done = True
            tick(now=True)  # a partition through may move the watermark a long way

        def tick(now: bool = False) -> None:
            nonlocal next_tick
            t = time.monotonic()
            if now or t >= next_tick:
                next_tick = t + 0.1
                inj.advance(min(self.watermark(), end))
                if on_progress is not None:
                    on_progress(Progress(sent, self.total, inj.reported, t - start))

        pieces = [p.piece for p in self._parts.values()]
        read_slices(self.bootstrap, pieces, send, finished)
        inj.advance(end)
        inj.close()  # flushes, then reports the final watermark
        copier.source.close()
        elapsed = time.monotonic() - start
        if on_progress is not None:
            on_progress(Progress(sent, self.total, inj.reported, elapsed))
        return {
            "stream": self.stream,
            "from_namespace": self.source,
            "namespace": self.namespace,
            "records": sent,
            "late": late,
            "watermark": inj.reported,
            "seconds": round(elapsed, 2),
            "records_per_s": round(sent / elapsed) if elapsed > 0 else None,
        }
