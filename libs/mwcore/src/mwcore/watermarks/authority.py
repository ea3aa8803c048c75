"""The watermark authority: reads report streams, keeps the interval map and backlog
segments, computes watermarks, journals, publishes.

One step:

1. every ``topology_refresh_s``: read the topology hash (computations and injectors
   declare themselves there; new ones are picked up while running);
2. read new entries of every known report stream, in order, from the journaled
   positions: grants set an interval's current token, reports with any other token
   are rejected (counted);
3. if anything changed (or a heartbeat is due): compute, **journal to Redis, then
   publish** (a restart resumes from the journal, so nothing published is ever lost
   and published values never go back), each computation as one record on the
   compacted watermark topic.

Shards: with ``shards=N`` each process publishes (and journals) only the computations
whose name hashes to its ``shard``; each reads every report stream, so the shards
agree on the graph.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog
from confluent_kafka import Producer

from mwcore.transport import producer_config
from mwcore.watermarks.feed import WatermarkFeed, Watermarks, ensure_watermark_topic
from mwcore.watermarks.model import Graph, IntervalView, Node, Options, Published
from mwcore.watermarks.reports import Grant, NodeSpec, Segment, decode_entry, report_stream, topology_key

log = structlog.get_logger("mwcore.authority")


@dataclass(frozen=True)
class AuthorityConfig:
    bootstrap: str
    namespace: str = "default"
    shard: int = 0
    shards: int = 1
    block_ms: int = 20
    heartbeat_s: float = 1.0
    topology_refresh_s: float = 0.5
    backlog: bool = True  # False: the negative control (ignores records in the backlog)
    check_tokens: bool = True  # False: the negative control (accepts stale-token reports)
    percentile: float = 0.99
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
    by_node: dict[str, int] = field(default_factory=dict)


TokenLookup = Callable[[str, int], str | None]


class Authority:
    def __init__(
        self,
        client: redis.Redis,
        config: AuthorityConfig,
        token_of: TokenLookup,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._r = client
        self.cfg = config
        self._token_of = token_of
        self._clock = clock
        self.graph = Graph(
            Options(backlog=config.backlog, percentile=config.percentile, check_tokens=config.check_tokens)
        )
        self.positions: dict[str, str] = {}  # node name -> last stream id applied
        self.counters = AuthorityCounters()
        self._journal_key = f"mw:wma:{config.namespace}:{config.shard}"
        self._producer: Producer | None = None
        self._topic = ""
        self._topology_at = 0.0
        self._heartbeat_at = 0.0  # the last round that republished every computation
        self._last_sent: dict[str, Watermarks] = {}
        self._trimmed_at = time.monotonic()
        self._gap_checked: set[str] = set()

    # -- life cycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Create the topic; resume from the journal; never publish below the topic."""
        self._topic = ensure_watermark_topic(self.cfg.bootstrap, self.cfg.namespace)
        self._producer = Producer(producer_config(self.cfg.bootstrap, **{"linger.ms": 0}))
        self._restore()
        feed = WatermarkFeed(self.cfg.bootstrap, self.cfg.namespace)
        try:
            feed.read_to_end()
            for name, wm in feed.latest.items():
                if self.owns(name):
                    self._clamp(name, wm)
                    self._last_sent[name] = wm
        finally:
            feed.close()
        self._refresh_topology(force=True)

    def owns(self, name: str) -> bool:
        return self.cfg.shards <= 1 or zlib.crc32(name.encode()) % self.cfg.shards == self.cfg.shard

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)

    # -- one step ------------------------------------------------------------------------

    def step(self) -> bool:
        """Apply new reports, then compute, journal and publish if needed. True if
        anything was published."""
        self.counters.steps += 1
        self._refresh_topology()
        changed = self._read(self.cfg.block_ms)
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

    def _refresh_topology(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._topology_at < self.cfg.topology_refresh_s:
            return
        self._topology_at = now
        for name, raw in self._r.hgetall(topology_key(self.cfg.namespace)).items():
            n = name.decode() if isinstance(name, bytes) else str(name)
            spec = NodeSpec.decode(n, raw)
            if n not in self.graph.nodes:
                log.info("node_declared", node=n, kind=spec.kind, inputs=spec.inputs, outputs=spec.outputs)
            self.graph.declare(spec)

    def _read(self, block_ms: int) -> bool:
        streams = {
            report_stream(self.cfg.namespace, n): self.positions.get(n, "0-0") for n in self.graph.nodes
        }
        if not streams:
            time.sleep(block_ms / 1000)
            return False
        names = {report_stream(self.cfg.namespace, n): n for n in self.graph.nodes}
        resp: Any = self._r.xread(streams, count=10_000, block=block_ms or None)  # type: ignore[arg-type]
        changed = False
        now_ms = self._clock()
        for key, entries in resp or []:
            k = key.decode() if isinstance(key, bytes) else str(key)
            name = names[k]
            node = self.graph.nodes[name]
            if name not in self._gap_checked:
                self._gap_checked.add(name)
                if self._gap(k, self.positions.get(name, "0-0")):
                    log.error("report_stream_gap", node=name, after=self.positions[name])
                    self.counters.gaps += 1
            for entry_id, fields in entries:
                raw = fields.get(b"r") or fields.get("r")
                self._apply(node, decode_entry(raw), now_ms)
                self.positions[name] = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                changed = True
        return changed

    def _gap(self, key: str, position: str) -> bool:
        """Were entries after ``position`` trimmed before this authority read them?
        (Checked once per stream after a start: only a long outage can cause it.)"""
        if position == "0-0":
            return False
        oldest = self._r.xrange(key, count=1)
        if not oldest:
            return False
        first = oldest[0][0]
        return _id(first.decode() if isinstance(first, bytes) else str(first)) > _id(position)

    def _trim(self) -> None:
        """Trim the streams of owned nodes up to what every shard has applied."""
        journals = [self._r.get(f"mw:wma:{self.cfg.namespace}:{i}") for i in range(self.cfg.shards)]
        if any(j is None for j in journals):
            return  # a shard has not journaled yet: it may still need everything
        positions = [json.loads(j)["positions"] for j in journals if j is not None]
        for name in self.graph.nodes:
            if not self.owns(name):
                continue
            ids = [p.get(name) for p in positions]
            if any(i is None for i in ids):
                continue
            low = min(ids, key=lambda i: _id(str(i)))
            self._r.xtrim(report_stream(self.cfg.namespace, name), minid=str(low))

    def _apply(self, node: Node, entry: Any, now_ms: int) -> None:
        if isinstance(entry, Grant):
            self.counters.grants += 1
            node.grant(entry.index, entry.token)
            return
        if not node.knows(entry.index):
            # The stream was trimmed past this interval's grant: take Redis's word.
            token = self._token_of(node.name, entry.index)
            if token is not None:
                node.grant(entry.index, token)
        if node.report(entry, now_ms, self.cfg.check_tokens):
            self.counters.reports += 1
        else:
            self.counters.rejected += 1
            log.warning("report_rejected", node=node.name, index=entry.index, token=entry.token)

    # -- journal -------------------------------------------------------------------------

    def _journal(self) -> None:
        data = {
            "positions": self.positions,
            "nodes": {
                n.name: {
                    "intervals": {str(i): v.__dict__ for i, v in n.intervals.items()},
                    "segments": {
                        f: [[s.end, s.min_ts, s.count] for s in segs] for f, segs in n.segments.items()
                    },
                    "published": n.published.__dict__,
                }
                for n in self.graph.nodes.values()
            },
        }
        self._r.set(self._journal_key, json.dumps(data, separators=(",", ":")))
        self.counters.journaled += 1

    def _restore(self) -> None:
        raw = self._r.get(self._journal_key)
        if raw is None:
            return
        data = json.loads(raw)
        self.positions = dict(data["positions"])
        specs = {
            (n.decode() if isinstance(n, bytes) else str(n)): NodeSpec.decode(
                n.decode() if isinstance(n, bytes) else str(n), v
            )
            for n, v in self._r.hgetall(topology_key(self.cfg.namespace)).items()
        }
        for name, nd in data["nodes"].items():
            spec = specs.get(name) or NodeSpec(name, "computation", (), (), 1)
            node = self.graph.declare(spec)
            node.intervals = {int(i): IntervalView(**v) for i, v in nd["intervals"].items()}
            node.segments = {
                f: [Segment(f.rpartition(":")[0], int(f.rpartition(":")[2]), e, m, c) for e, m, c in segs]
                for f, segs in nd["segments"].items()
            }
            node.published = Published(**nd["published"])
        log.info("journal_restored", nodes=len(data["nodes"]))

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
        assert self._producer is not None
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
            self._producer.produce(self._topic, wm.encode(), name.encode())
            self._last_sent[name] = wm
            sent += 1
        self._producer.poll(0)
        self.counters.published += sent
        return sent

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
