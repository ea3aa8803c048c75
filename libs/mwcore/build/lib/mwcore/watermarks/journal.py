"""The authority's journal: how far it applied each report stream, and what it knows of
each node (its interval map, its backlog segments, what it published) and of each
retired computation (what it left unread), as one JSON string in Redis
(``mw:wma:<namespace>:<shard>``). A restarted authority resumes from it."""

from __future__ import annotations

import json
from typing import Any

from mwcore.watermarks.model import Graph, IntervalView, Published
from mwcore.watermarks.report_format import NodeSpec, Segment, Stream, parse_stream_field, stream_field


def _segments_out(segments: dict[str, list[Segment]]) -> dict[str, list[list[int]]]:
    return {f: [[s.end, s.min_ts, s.count] for s in segs] for f, segs in segments.items()}


def _segments_in(data: dict[str, list[list[int]]]) -> dict[str, list[Segment]]:
    out = {}
    for f, segs in data.items():
        topic, _, part = f.rpartition(":")
        out[f] = [Segment(topic, int(part), e, m, c) for e, m, c in segs]
    return out


def encode(graph: Graph, positions: dict[Stream, str]) -> str:
    data = {
        "positions": {stream_field(s): p for s, p in positions.items()},
        "nodes": {
            n.name: {
                "intervals": {str(i): v.__dict__ for i, v in n.intervals.items()},
                "segments": _segments_out(n.segments),
                "published": n.published.__dict__,
            }
            for n in graph.nodes.values()
        },
        "retired": {
            r.name: {
                "spec": json.loads(r.spec.encode()),
                "segments": _segments_out(r.segments),
                "published": r.published.__dict__,
                "position": {str(i): p for i, p in r.position.items()},
            }
            for r in graph.retired.values()
        },
    }
    return json.dumps(data, separators=(",", ":"))


def restore(graph: Graph, raw: bytes | str, specs: dict[str, NodeSpec]) -> dict[Stream, str]:
    """Put the journal ``raw`` into ``graph``; returns the stream positions. A node
    missing from ``specs`` (the topology as it is now) gets an empty declaration until
    it declares itself again (or turns out to be retired)."""
    data: dict[str, Any] = json.loads(raw)
    for name, nd in data["nodes"].items():
        node = graph.declare(specs.get(name) or NodeSpec(name, "computation", (), (), 1))
        node.intervals = {int(i): IntervalView(**v) for i, v in nd["intervals"].items()}
        node.segments = _segments_in(nd["segments"])
        node.published = Published(**nd["published"])
    for name, rd in data.get("retired", {}).items():
        gone = graph.retire(name, NodeSpec.decode(name, json.dumps(rd["spec"])))
        gone.segments = _segments_in(rd["segments"])
        gone.published = Published(**rd["published"])
        position = rd.get("position")  # an older journal's: one stream per node, a str
        gone.position = {int(i): p for i, p in position.items()} if isinstance(position, dict) else {}
    return _positions(data)


def positions(raw: bytes | str) -> dict[Stream, str]:
    """Only the stream positions of a journal (another shard's, for trimming)."""
    return _positions(json.loads(raw))


def _positions(data: dict[str, Any]) -> dict[Stream, str]:
    out = {}
    for text, position in data["positions"].items():
        stream = parse_stream_field(text)
        if stream is not None:
            out[stream] = str(position)
    return out
