"""The authority's arithmetic, pure: interval map, backlog segments, watermarks.

For a computation A (semantics section 4):

- oldest(A): the oldest work over A's intervals, as last reported; held at MIN until
  every interval has reported once (an unknown interval may hold anything);
- floor(P, A): over the output partitions of P that A reads, the oldest timestamp of
  P's segments that A has not yet committed past (records in the Kafka backlog);
- in(A) = min over A's input topics T, over each producer P of T, of
  min(out(P), floor(P, A)); a topic nobody has declared producing holds at MIN;
- out(A) = min(in(A), oldest(A)); an injector's out is the minimum of its processes'
  reported watermarks (a missing process holds it).

A retired computation (``mw retire``) is no node any more: its intervals and its own
watermarks are gone, it consumes nothing (segments no longer wait for it), and it
holds its consumers only by the records it left in their input partitions (its
backlog segments, kept until they have read past them). A topic whose producers are
all retired is finished: it holds its consumers by that backlog alone.

Published values never go back (I-7): each is the maximum of what was published
before and what is computed now. Cycles are fine: the equations are solved by
relaxing from the upper bound until nothing changes.

The percentile watermark is the same computation with the backlog floor replaced by
the timestamp below which ``1 - percentile`` of the backlog's records lie, and with
injector processes that stopped reporting left out: faster, and not exact.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.controls import SAFE, NegativeControls
from mwcore.watermarks.report_format import NodeSpec, Report, Segment

MIN = MIN_WATERMARK
MAX = MAX_WATERMARK


@dataclass
class IntervalView:
    token: str = ""
    reported: bool = False
    oldest: int = MIN
    positions: dict[str, int] = field(default_factory=dict)
    reported_at: int = 0  # authority clock, ms


@dataclass
class Published:
    input: int = MIN
    output: int = MIN
    input_pct: int = MIN
    output_pct: int = MIN


@dataclass
class Node:
    spec: NodeSpec
    intervals: dict[int, IntervalView] = field(default_factory=dict)
    # "topic:partition" -> live segments this node handed to that partition
    segments: dict[str, list[Segment]] = field(default_factory=dict)
    published: Published = field(default_factory=Published)
    rejected: int = 0
    accepted: int = 0

    @property
    def name(self) -> str:
        return self.spec.name

    # -- applying the report stream ------------------------------------------------------

    def grant(self, index: int, token: str) -> None:
        """A new owner's token is current: from here on only its reports count. What the
        former owner last reported stays (the new owner's checkpoint is no newer)."""
        self.intervals.setdefault(index, IntervalView()).token = token

    def knows(self, index: int) -> bool:
        view = self.intervals.get(index)
        return view is not None and bool(view.token)

    def report(self, r: Report, now_ms: int, check_token: bool = True) -> bool:
        """Apply ``r`` if its token is current; False (and counted) if stale.
        ``check_token=False`` exists only for a negative control."""
        view = self.intervals.get(r.index)
        if check_token and (view is None or not view.token or view.token != r.token):
            # Its oldest work and positions are not the interval's any more, but its
            # segments are records really in Kafka: keeping them is only conservative.
            self.rejected += 1
            self._add_segments(r)
            return False
        if view is None:
            view = self.intervals[r.index] = IntervalView(token=r.token)
        self.accepted += 1
        view.reported = True
        view.oldest = r.oldest
        view.reported_at = now_ms
        for fld, pos in r.positions.items():
            if pos > view.positions.get(fld, -1):
                view.positions[fld] = pos
        self._add_segments(r)
        return True

    def _add_segments(self, r: Report) -> None:
        for s in r.segments:
            self.segments.setdefault(f"{s.topic}:{s.partition}", []).append(s)

    # -- derived -------------------------------------------------------------------------

    def oldest(self, now_ms: int = 0, stale_ms: int | None = None) -> int:
        """Oldest work over all intervals; MIN while one has never reported. With
        ``stale_ms`` (percentile only), intervals silent that long are left out."""
        views = [v for i, v in self.intervals.items() if i < self.spec.intervals]
        reported = [v for v in views if v.reported]
        if stale_ms is not None:
            live = [v for v in reported if now_ms - v.reported_at <= stale_ms]
            if not live:
                return MIN
            return min(v.oldest for v in live)
        if len(reported) < self.spec.intervals:
            return MIN
        return min((v.oldest for v in reported), default=MAX)

    def committed(self, fld: str) -> int:
        """How far this node has committed reading partition ``fld`` (0: not at all)."""
        return max((v.positions.get(fld, 0) for v in self.intervals.values()), default=0)


@dataclass
class Retired:
    """What is left of a retired computation: what it wrote (its output topics) and
    the records it left there that a consumer has not read yet."""

    spec: NodeSpec
    segments: dict[str, list[Segment]] = field(default_factory=dict)
    published: Published = field(default_factory=Published)  # its last values (I-7 if it comes back)
    position: dict[int, str] = field(default_factory=dict)  # how far each report stream was applied

    @property
    def name(self) -> str:
        return self.spec.name


Producer = Node | Retired


@dataclass
class Options:
    percentile: float = 0.99
    # negative controls: ignore_backlog, publish_unclamped, retire_drops_backlog
    controls: NegativeControls = SAFE
    injector_stale_ms: int = 5000  # percentile only: a silent injector process is left out


MAX_SEGMENTS = 256  # per producer and partition


def _merged(segs: list[Segment]) -> Segment:
    first = segs[0]
    return Segment(
        first.topic,
        first.partition,
        max(s.end for s in segs),
        min(s.min_ts for s in segs),
        sum(s.count for s in segs),
    )


def _coarsened(segs: list[Segment], most: int) -> list[Segment]:
    """A consumer far behind: at most ``most`` segments, by merging, again and again, the
    two neighbours with the fewest records between them. Safe (a merged segment ends
    where the later one ended and holds the older timestamp), and the backlog stays cut
    into pieces of about equal size, so the floor follows the consumer as it reads.
    (Merging the oldest half into one held the floor at that piece's oldest record
    until the consumer caught up.)"""
    out = list(segs)
    while len(out) > most:
        i = min(range(len(out) - 1), key=lambda j: out[j].count + out[j + 1].count)
        out[i : i + 2] = [_merged(out[i : i + 2])]
    return out


class Graph:
    """Every node the authority knows, and the watermarks derived from them."""

    def __init__(self, options: Options | None = None) -> None:
        self.nodes: dict[str, Node] = {}
        self.retired: dict[str, Retired] = {}
        self.options = options or Options()
        self._producers: dict[str, list[Node]] = {}
        self._retired_producers: dict[str, list[Retired]] = {}
        self._consumers: dict[str, list[Node]] = {}

    def declare(self, spec: NodeSpec) -> Node:
        """A node as it declares itself. A retired one comes back with what it left:
        its backlog segments (still unread records) and its published values (I-7)."""
        node = self.nodes.get(spec.name)
        if node is None:
            node = self.nodes[spec.name] = Node(spec)
            gone = self.retired.pop(spec.name, None)
            if gone is not None:
                node.segments, node.published = gone.segments, gone.published
        else:
            node.spec = spec
        self._index()
        return node

    def retire(self, name: str, spec: NodeSpec, handover: Iterable[Segment] = ()) -> Retired:
        """Drop node ``name`` (its intervals, its oldest work, its inputs) and keep, as a
        retired producer of ``spec.outputs``, its backlog segments plus ``handover``:
        what it may have written without reporting it yet."""
        node = self.nodes.pop(name, None)
        gone = self.retired.get(name) or Retired(spec)
        left = [] if node is None else [s for segs in node.segments.values() for s in segs]
        if node is not None:
            gone.published = node.published
        if self.options.controls.retire_drops_backlog:  # the negative control: nothing left
            left, handover = [], ()
        for s in (*left, *handover):
            gone.segments.setdefault(f"{s.topic}:{s.partition}", []).append(s)
        self.retired[name] = gone
        self._index()
        return gone

    def _index(self) -> None:
        self._producers, self._consumers, self._retired_producers = {}, {}, {}
        for n in self.nodes.values():
            for t in n.spec.outputs:
                self._producers.setdefault(t, []).append(n)
            if n.spec.kind == "computation":
                for t in n.spec.inputs:
                    self._consumers.setdefault(t, []).append(n)
        for r in self.retired.values():
            for t in r.spec.outputs:
                self._retired_producers.setdefault(t, []).append(r)

    def producers(self, topic: str) -> list[Node]:
        return self._producers.get(topic, [])

    def retired_producers(self, topic: str) -> list[Retired]:
        return self._retired_producers.get(topic, [])

    def consumers(self, topic: str) -> list[Node]:
        return self._consumers.get(topic, [])

    def _backlog(self, producer: Producer, topic: str, consumer: Node) -> Iterable[Segment]:
        prefix = topic + ":"
        for fld, segs in producer.segments.items():
            if fld.startswith(prefix):
                pos = consumer.committed(fld)
                for s in segs:
                    if s.end > pos:
                        yield s

    def _floor(self, producer: Producer, topic: str, consumer: Node) -> int:
        return min((s.min_ts for s in self._backlog(producer, topic, consumer)), default=MAX)

    def _quantile(self, producer: Producer, topic: str, consumer: Node) -> int:
        segs = sorted(self._backlog(producer, topic, consumer), key=lambda s: s.min_ts)
        total = sum(s.count for s in segs)
        if not total:
            return MAX
        allowed = total * (1.0 - self.options.percentile)
        below = 0
        for s in segs:
            below += s.count
            if below > allowed:
                return s.min_ts
        return MAX

    def compute(self, now_ms: int) -> dict[str, Published]:
        """Solve for every node's watermarks; clamp to what was published; GC segments."""
        opts = self.options
        nodes = list(self.nodes.values())
        oldest = {n.name: n.oldest() for n in nodes}
        oldest_pct = {
            n.name: n.oldest(now_ms, opts.injector_stale_ms) if n.spec.kind == "injector" else oldest[n.name]
            for n in nodes
        }
        out = dict(oldest)
        out_pct = dict(oldest_pct)
        inp: dict[str, int] = {}
        inp_pct: dict[str, int] = {}
        # The backlog does not depend on the watermarks: once per step.
        floors: dict[tuple[str, str, str], tuple[int, int]] = {}
        backlog = not opts.controls.ignore_backlog
        if backlog:
            for a in nodes:
                if a.spec.kind == "computation":
                    for topic in a.spec.inputs:
                        writers: list[Producer] = [*self.producers(topic), *self.retired_producers(topic)]
                        for p in writers:
                            floors[(a.name, topic, p.name)] = (
                                self._floor(p, topic, a),
                                self._quantile(p, topic, a),
                            )
        for _ in range(len(nodes) + 1):
            changed = False
            for a in nodes:
                if a.spec.kind != "computation":
                    continue
                w, wp = MAX, MAX
                if not a.spec.inputs:
                    w = wp = MIN  # known only from the journal or the topic: hold
                for topic in a.spec.inputs:
                    producers = self.producers(topic)
                    retired = self.retired_producers(topic)
                    if not producers and not retired:
                        w = wp = MIN  # nobody declared writing it yet: hold
                    for p in producers:
                        w = min(w, out[p.name])
                        wp = min(wp, out_pct[p.name])
                        if backlog:
                            f, fp = floors[(a.name, topic, p.name)]
                            w = min(w, f)
                            wp = min(wp, fp)
                    if backlog:
                        for gone in retired:  # writes nothing more: only what it left holds
                            f, fp = floors[(a.name, topic, gone.name)]
                            w = min(w, f)
                            wp = min(wp, fp)
                new_out = min(w, oldest[a.name])
                new_out_pct = min(wp, oldest_pct[a.name])
                if (
                    inp.get(a.name) != w
                    or inp_pct.get(a.name) != wp
                    or out[a.name] != new_out
                    or out_pct[a.name] != new_out_pct
                ):
                    changed = True
                inp[a.name], inp_pct[a.name] = w, wp
                out[a.name], out_pct[a.name] = new_out, new_out_pct
            if not changed:
                break
        result: dict[str, Published] = {}
        for n in nodes:
            pub = n.published
            if opts.controls.publish_unclamped:  # the negative control of I-7: may go back
                pub.output = pub.output_pct = pub.input = pub.input_pct = MIN
            pub.output = max(pub.output, out[n.name])
            pub.output_pct = max(pub.output_pct, out_pct[n.name], pub.output)
            if n.spec.kind == "computation":
                pub.input = max(pub.input, inp[n.name])
                pub.input_pct = max(pub.input_pct, inp_pct[n.name], pub.input)
            else:
                pub.input, pub.input_pct = pub.output, pub.output_pct
            result[n.name] = pub
        self._collect()
        return result

    def _collect(self) -> None:
        """Drop segments every consumer of their stream has committed past. A stream
        nobody declares reading yet (a consumer may still be starting) keeps its
        segments, merged into one per partition: safe, and of constant size. A retired
        producer stays known (its topics are finished) with no segments left."""
        producers: list[Producer] = [*self.nodes.values(), *self.retired.values()]
        for p in producers:
            for fld in list(p.segments):
                topic = fld.rpartition(":")[0]
                segs = p.segments[fld]
                consumers = self._consumers.get(topic, [])
                if not consumers:
                    if len(segs) > 1:
                        p.segments[fld] = [_merged(segs)]
                    continue
                done = min(c.committed(fld) for c in consumers)
                live = [s for s in segs if s.end > done]
                if len(live) > MAX_SEGMENTS:
                    live = _coarsened(live, MAX_SEGMENTS)
                if live:
                    p.segments[fld] = live
                else:
                    del p.segments[fld]
