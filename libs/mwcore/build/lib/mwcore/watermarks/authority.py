"""The watermark authority: reads report streams, keeps the interval map and backlog
segments, computes watermarks, journals, publishes.

One step:

1. every ``topology_refresh_s``: read the topology hash (computations and injectors
   declare themselves there; new ones are picked up while running) and the
   retirements (``mw retire``: a retired computation's report stream is applied to its
   end, then it leaves the graph, keeping only what it left unread; declared again, it
   comes back);
2. read new entries of every known report stream (one per interval of each node), in
   order, from the journaled positions: grants set an interval's current token,
   reports with any other token are rejected (counted);
3. if anything changed (or a heartbeat is due): compute, **journal to Redis, then
   publish** (a restart resumes from the journal, so nothing published is ever lost
   and published values never go back), each computation as one record on the
   compacted watermark topic.

Its I/O goes through two ports: ``AuthorityLog`` (Redis, ``store/authority_log.py``) and
``Publisher`` (the topic, ``transport/watermark_topic.py``).

Shards: with ``shards=N`` each process publishes (and journals) only the computations
whose name hashes to its ``shard``; each reads every report stream, so the shards
agree on the graph.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from mwcore.controls import SAFE, NegativeControls
from mwcore.watermarks import journal
from mwcore.watermarks.model import MIN, Graph, Node, Options, Published
from mwcore.watermarks.published import Watermarks
from mwcore.watermarks.report_format import Grant, NodeSpec, Report, Segment, Stream, streams
from mwcore.watermarks.retire import Retirement

log = structlog.get_logger("mwcore.authority")


@dataclass(frozen=True)
class AuthorityConfig:
    namespace: str = "default"
    shard: int = 0
    shards: int = 1
    block_ms: int = 20
    heartbeat_s: float = 1.0
    topology_refresh_s: float = 0.5
    percentile: float = 0.99
    controls: NegativeControls = SAFE  # the authority's: see watermarks/model.py, and accept_stale_reports
    trim_every_s: float = 5.0


@dataclass
class AuthorityCounters:
    reports: int = 0
    grants: int = 0
    rejected: int = 0
    published: int = 0
    journaled: int = 0
    steps: int = 0
    gaps: int = 0
    retired: int = 0
    revived: int = 0
    by_node: dict[str, int] = field(default_factory=dict)


Entry = tuple[str, Report | Grant]  # (position on the interval's stream, what it says)


class AuthorityLog(Protocol):
    """Where reports, declarations and the journal are (``store.authority_log``: Redis)."""

    def topology(self) -> tuple[dict[str, NodeSpec], dict[str, Retirement]]: ...
    def read(self, after: Mapping[Stream, str], block_ms: int) -> dict[Stream, list[Entry]]: ...
    def read_after(self, stream: Stream, after: str, count: int = 10_000) -> list[Entry]: ...
    def oldest_id(self, stream: Stream) -> str | None: ...
    def trim(self, stream: Stream, below: str) -> None: ...
    def current_token(self, name: str, index: int) -> str | None: ...
    def load_journal(self, shard: int) -> str | None: ...
    def save_journal(self, shard: int, journal: str) -> None: ...


class Publisher(Protocol):
    """The compacted watermark topic (``transport.watermark_topic``: Kafka)."""

    def read_all(self) -> dict[str, Watermarks]: ...
    def publish(self, wm: Watermarks) -> None: ...
    def tombstone(self, name: str) -> None: ...
    def poll(self) -> None: ...
    def flush(self, timeout: float = 5.0) -> None: ...


class Authority:
    def __init__(
        self,
        log: AuthorityLog,
        publisher: Publisher,
        config: AuthorityConfig,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.log = log
        self.publisher = publisher
        self.cfg = config
        self._clock = clock
        self.graph = Graph(Options(percentile=config.percentile, controls=config.controls))
        self.positions: dict[Stream, str] = {}  # (node, interval) -> last stream id applied
        self.counters = AuthorityCounters()
        self._topology_at = 0.0
        self._heartbeat_at = 0.0  # the last round that republished every computation
        self._last_sent: dict[str, Watermarks] = {}
        self._trimmed_at = time.monotonic()
        self._gap_checked: set[Stream] = set()

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Resume from the journal; never publish below what the topic holds."""
        self._restore()
        for name, wm in self.publisher.read_all().items():
            if not self.owns(name):
                continue
            if name in self.graph.retired:  # its removal may not have reached the topic
                self._tombstone(name)
                continue
            self._clamp(name, wm)
            self._last_sent[name] = wm
        self._refresh_topology(force=True)

    def owns(self, name: str) -> bool:
        return self.cfg.shards <= 1 or zlib.crc32(name.encode()) % self.cfg.shards == self.cfg.shard

    def close(self) -> None:
        self.publisher.flush(5)

    # -- one step ------------------------------------------------------------------------

    def step(self) -> bool:
        """Apply new reports, then compute, journal and publish if needed. True if
        anything was published."""
        self.counters.steps += 1
        changed = self._refresh_topology()
        changed = self._read(self.cfg.block_ms) or changed
        now = time.monotonic()
        # Every heartbeat_s each computation is published again, changed or not (a
        # follower sees that the authority is alive), whatever else was published since.
        heartbeat = now - self._heartbeat_at >= self.cfg.heartbeat_s
        if not changed and not heartbeat:
            return False
        pubs = self.graph.compute(self._clock())
        self._journal()
        if now - self._trimmed_at >= self.cfg.trim_every_s:
            self._trimmed_at = now
            self._trim()
        sent = self._publish(pubs, heartbeat=heartbeat)
        if heartbeat:
            self._heartbeat_at = now
        return sent > 0

    def _refresh_topology(self, force: bool = False) -> bool:
        """Take up declarations and retirements; True if a node was retired or came back."""
        now = time.monotonic()
        if not force and now - self._topology_at < self.cfg.topology_refresh_s:
            return False
        self._topology_at = now
        specs, retired = self.log.topology()
        changed = False
        for n, spec in specs.items():
            if n in self.graph.retired:
                self._revive(spec)
                changed = True
            elif n not in self.graph.nodes:
                log.info("node_declared", node=n, kind=spec.kind, inputs=spec.inputs, outputs=spec.outputs)
            self.graph.declare(spec)
        for name, retirement in retired.items():
            if name not in specs and name not in self.graph.retired:
                self._retire(retirement)
                changed = True
        return changed

    def _retire(self, rec: Retirement) -> None:
        """Apply what is left on the retired computation's stream, then drop it from the
        graph, keeping its backlog segments and, per output partition, one up to the end
        it had when retired at its last published output watermark: nothing it wrote,
        reported or not, can be older than that (a node never known: MIN)."""
        node = self.graph.nodes.get(rec.name)
        floor = MIN
        position: dict[int, str] = {}
        if node is not None:
            self._drain(node)
            floor = node.published.output
            position = {s[1]: self.positions.pop(s) for s in list(self.positions) if s[0] == rec.name}
        handover = [Segment(t, p, end, floor, 1) for (t, p), end in sorted(rec.ends.items())]
        gone = self.graph.retire(rec.name, rec.spec, handover)
        gone.position = position or gone.position
        self._gap_checked = {s for s in self._gap_checked if s[0] != rec.name}
        waiting = sorted({c.name for t in rec.spec.outputs for c in self.graph.consumers(t)})
        log.warning("node_retired", node=rec.name, retired_at=rec.at_ms, floor=floor, waiting=waiting)
        self.counters.retired += 1
        if self.owns(rec.name):
            self._tombstone(rec.name)

    def _revive(self, spec: NodeSpec) -> None:
        """Declared again after its retirement: back in the graph with what it left
        (segments, published values), reading its stream on from where it stopped."""
        gone = self.graph.retired[spec.name]
        for index, position in gone.position.items():
            self.positions[(spec.name, index)] = position
        log.warning("node_revived", node=spec.name, inputs=spec.inputs, outputs=spec.outputs)
        self.counters.revived += 1

    def _drain(self, node: Node) -> None:
        """Apply every entry of ``node``'s report streams not applied yet."""
        for stream in streams(node.spec):
            while True:
                entries = self.log.read_after(stream, self.positions.get(stream, "0-0"))
                if not entries:
                    break
                self._apply_entries(node, stream, entries, self._clock())

    def _read(self, block_ms: int) -> bool:
        if not self.graph.nodes:
            time.sleep(block_ms / 1000)
            return False
        after = {s: self.positions.get(s, "0-0") for n in self.graph.nodes.values() for s in streams(n.spec)}
        changed = False
        now_ms = self._clock()
        for stream, entries in self.log.read(after, block_ms).items():
            node = self.graph.nodes[stream[0]]
            if stream not in self._gap_checked:
                self._gap_checked.add(stream)
                if self._gap(stream, self.positions.get(stream, "0-0")):
                    after_id = self.positions[stream]
                    log.error("report_stream_gap", node=stream[0], index=stream[1], after=after_id)
                    self.counters.gaps += 1
            self._apply_entries(node, stream, entries, now_ms)
            changed = changed or bool(entries)
        return changed

    def _apply_entries(self, node: Node, stream: Stream, entries: list[Entry], now_ms: int) -> None:
        for entry_id, entry in entries:
            self._apply(node, entry, now_ms)
            self.positions[stream] = entry_id

    def _gap(self, stream: Stream, position: str) -> bool:
        """Were entries after ``position`` trimmed before this authority read them?
        (Checked once per stream after a start: only a long outage can cause it.)"""
        if position == "0-0":
            return False
        oldest = self.log.oldest_id(stream)
        return oldest is not None and _id(oldest) > _id(position)

    def _trim(self) -> None:
        """Trim the streams of owned nodes up to what every shard has applied."""
        journals = [self.log.load_journal(i) for i in range(self.cfg.shards)]
        if any(j is None for j in journals):
            return  # a shard has not journaled yet: it may still need everything
        positions = [journal.positions(j) for j in journals if j is not None]
        for node in self.graph.nodes.values():
            if not self.owns(node.name):
                continue
            for stream in streams(node.spec):
                ids = [p.get(stream) for p in positions]
                if any(i is None for i in ids):
                    continue
                low = min(ids, key=lambda i: _id(str(i)))
                self.log.trim(stream, str(low))

    def _apply(self, node: Node, entry: Report | Grant, now_ms: int) -> None:
        if isinstance(entry, Grant):
            self.counters.grants += 1
            node.grant(entry.index, entry.token)
            return
        if not node.knows(entry.index):
            # The stream was trimmed past this interval's grant: take Redis's word.
            token = self.log.current_token(node.name, entry.index)
            if token is not None:
                node.grant(entry.index, token)
        if node.report(entry, now_ms, not self.cfg.controls.accept_stale_reports):
            self.counters.reports += 1
        else:
            self.counters.rejected += 1
            log.warning("report_rejected", node=node.name, index=entry.index, token=entry.token)

    # -- journal -------------------------------------------------------------------------

    def _journal(self) -> None:
        self.log.save_journal(self.cfg.shard, journal.encode(self.graph, self.positions))
        self.counters.journaled += 1

    def _restore(self) -> None:
        raw = self.log.load_journal(self.cfg.shard)
        if raw is None:
            return
        specs, _ = self.log.topology()
        self.positions = journal.restore(self.graph, raw, specs)
        log.info("journal_restored", nodes=len(self.graph.nodes), retired=len(self.graph.retired))

    def _clamp(self, name: str, wm: Watermarks) -> None:
        node = self.graph.nodes.get(name)
        if node is None:
            node = self.graph.declare(NodeSpec(name, wm.kind, (), (), 1))
        p = node.published
        p.input = max(p.input, wm.input)
        p.output = max(p.output, wm.output)
        p.input_pct = max(p.input_pct, wm.input_pct)
        p.output_pct = max(p.output_pct, wm.output_pct)

    # -- publish -------------------------------------------------------------------------

    def _publish(self, pubs: dict[str, Published], heartbeat: bool) -> int:
        now = self._clock()
        sent = 0
        for name, p in pubs.items():
            if not self.owns(name):
                continue
            kind = self.graph.nodes[name].spec.kind
            wm = Watermarks(name, kind, p.input, p.output, p.input_pct, p.output_pct, now)
            last = self._last_sent.get(name)
            same = last is not None and (last.input, last.output, last.input_pct, last.output_pct) == (
                wm.input,
                wm.output,
                wm.input_pct,
                wm.output_pct,
            )
            if same and not heartbeat:
                continue
            self.publisher.publish(wm)
            self._last_sent[name] = wm
            sent += 1
        self.publisher.poll()
        self.counters.published += sent
        return sent

    def _tombstone(self, name: str) -> None:
        """Delete a retired computation's watermarks from the compacted topic (followers
        forget it; ``mw watermarks`` no longer shows it)."""
        self.publisher.tombstone(name)
        self._last_sent.pop(name, None)

    def latest(self) -> dict[str, int]:
        """Each computation's last published input watermark (an injector's: what it
        promised), for metrics; safe to call from another thread."""
        sent = dict(self._last_sent)
        return {n: w.output if w.kind == "injector" else w.input for n, w in sent.items()}

    def run(self, should_stop: Callable[[], bool], on_step: Callable[[], None] = lambda: None) -> None:
        while not should_stop():
            self.step()
            on_step()


def _id(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
