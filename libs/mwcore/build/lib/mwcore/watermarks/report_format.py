"""What interval owners and injectors tell the watermark authority, and where.

Each key interval of a computation (and each injector process) has one Redis stream
of reports, ``mw:{<namespace>/<name>/<index>}:wmr``, in its interval's hash slot (the
braces are its Redis Cluster hash tag). Two kinds of entries go in it, in the order
Redis serialises them:

- ``grant``: written by the grant script in the same atomic step that makes a new
  token current, so the authority learns of every grant in stream order;
- ``report``: written by the owner of an interval (or an injector process) with its
  token: its oldest work, its committed input positions, and the segments it handed
  to the backlog of each output partition since its last report.

The authority accepts a report only if its token is the interval's current one *at
that point of the stream*: a zombie's report comes after the grant that fenced it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mwcore.api.clock import MAX_WATERMARK

# A safety cap only: the authority trims each stream up to what every authority shard
# has journaled. An authority down long enough for the cap to bite (hours) loses
# reports; it logs ``report_stream_gap`` when it sees that.
STREAM_MAXLEN = 1_000_000


def interval_tag(namespace: str, name: str, index: int) -> str:
    """The Redis Cluster hash tag of one key interval (or injector process): every key
    of it, its report stream included, is in one hash slot."""
    return f"{{{namespace}/{name}/{index}}}"


def report_stream(namespace: str, name: str, index: int) -> str:
    return f"mw:{interval_tag(namespace, name, index)}:wmr"


Stream = tuple[str, int]  # one report stream: (node name, interval or process index)


def streams(spec: NodeSpec) -> list[Stream]:
    """A node's report streams: one per key interval (an injector: per process)."""
    return [(spec.name, i) for i in range(spec.intervals)]


def stream_field(stream: Stream) -> str:
    """A stream as a journal's JSON key, ``<name>/<index>``."""
    return f"{stream[0]}/{stream[1]}"


def parse_stream_field(text: str) -> Stream | None:
    """The stream of a journal key; None for a key of an older journal (one stream per
    node: its positions are of streams no longer written)."""
    name, sep, index = text.rpartition("/")
    return (name, int(index)) if sep and index.isdigit() else None


# The namespace's registries share the namespace's hash tag: one script touches them all.


def topology_key(namespace: str) -> str:
    return f"mw:topo:{{{namespace}}}"


def declared_key(namespace: str) -> str:
    """Hash: node name -> when a process last declared it (Redis's clock, ms)."""
    return f"mw:topo-at:{{{namespace}}}"


def retired_key(namespace: str) -> str:
    """Hash: name -> the retirement of a computation (``mw retire``), until it is
    declared again."""
    return f"mw:retired:{{{namespace}}}"


@dataclass(frozen=True, slots=True)
class Segment:
    """Records handed to one output partition: every offset below ``end`` that the
    reporter wrote since its last report, the oldest timestamp among them, how many."""

    topic: str
    partition: int
    end: int
    min_ts: int
    count: int


def encode_segments(segments: list[Segment]) -> bytes:
    return json.dumps([[s.topic, s.partition, s.end, s.min_ts, s.count] for s in segments]).encode()


def decode_segments(raw: bytes) -> list[Segment]:
    return [Segment(str(t), int(p), int(e), int(m), int(c)) for t, p, e, m, c in json.loads(raw)]


@dataclass(frozen=True)
class Report:
    index: int  # interval (or injector process) index
    token: str
    oldest: int  # oldest work (an injector: its low watermark); MAX_WATERMARK: none
    positions: dict[str, int] = field(default_factory=dict)  # "topic:partition" -> next offset
    segments: tuple[Segment, ...] = ()
    sent_ms: int = 0

    def encode(self) -> str:
        return json.dumps(
            {
                "k": "report",
                "i": self.index,
                "t": self.token,
                "o": None if self.oldest >= MAX_WATERMARK else self.oldest,
                "p": self.positions,
                "s": [[s.topic, s.partition, s.end, s.min_ts, s.count] for s in self.segments],
                "at": self.sent_ms,
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class Grant:
    index: int
    token: str


def decode_entry(raw: bytes | str) -> Report | Grant:
    data: dict[str, Any] = json.loads(raw)
    if data["k"] == "grant":
        return Grant(int(data["i"]), str(data["t"]))
    oldest = data.get("o")
    return Report(
        index=int(data["i"]),
        token=str(data["t"]),
        oldest=MAX_WATERMARK if oldest is None else int(oldest),
        positions={str(k): int(v) for k, v in data.get("p", {}).items()},
        segments=tuple(
            Segment(str(t), int(p), int(e), int(m), int(c)) for t, p, e, m, c in data.get("s", [])
        ),
        sent_ms=int(data.get("at", 0)),
    )


@dataclass(frozen=True)
class NodeSpec:
    """A computation or injector as it declares itself in the topology hash."""

    name: str
    kind: str  # "computation" | "injector"
    inputs: tuple[str, ...]  # topics
    outputs: tuple[str, ...]  # topics
    intervals: int  # key intervals (computation) or expected processes (injector)

    def encode(self) -> str:
        return json.dumps(
            {
                "kind": self.kind,
                "inputs": list(self.inputs),
                "outputs": list(self.outputs),
                "intervals": self.intervals,
            }
        )

    @classmethod
    def decode(cls, name: str, raw: bytes | str) -> NodeSpec:
        data = json.loads(raw)
        return cls(
            name,
            str(data["kind"]),
            tuple(data["inputs"]),
            tuple(data["outputs"]),
            int(data["intervals"]),
        )
