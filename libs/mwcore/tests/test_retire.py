"""``mw retire``: the authority's arithmetic for a retired computation (pure), its
journal, and the Redis scripts (declaration times, the liveness rule, the retirement
record) on a real ``redis-server``. The system test (``tests/test_retire.py``) runs
the command against a running authority."""

from __future__ import annotations

import json

import pytest
import redis

from mwcore.errors import ConfigError, RefusedError
from mwcore.store.report_sink import RedisReportSink
from mwcore.store.retire_log import RedisRetireLog
from mwcore.watermarks import journal
from mwcore.watermarks.model import MAX, MIN, Graph, Published
from mwcore.watermarks.report_format import (
    NodeSpec,
    Report,
    Segment,
    declared_key,
    report_stream,
    retired_key,
    topology_key,
)
from mwcore.watermarks.retire import Retirement, Retirer, rekey_stages

INJ = NodeSpec("inj", "injector", (), ("events",), 1)
LIVE = NodeSpec("live", "injector", (), ("mid",), 1)  # a second writer of "mid"
A = NodeSpec("a", "computation", ("events",), ("mid",), 1)
B = NodeSpec("b", "computation", ("mid",), ("out",), 1)


def graph(*specs: NodeSpec) -> Graph:
    g = Graph()
    for spec in specs:
        g.declare(spec).grant(0, spec.name)
    return g


def report(g: Graph, name: str, oldest: int, positions: dict[str, int] | None = None, *segs: Segment) -> None:
    assert g.nodes[name].report(Report(0, name, oldest, dict(positions or {}), segs), 0)


def test_a_retired_producer_holds_its_consumer_only_by_what_it_left_unread() -> None:
    g = graph(INJ, A, B)
    report(g, "inj", 1000)
    report(g, "a", 200, {"events:0": 3}, Segment("mid", 0, 5, 150, 5))  # stuck at 200: stopped
    report(g, "b", MAX, {"mid:0": 2})
    assert g.compute(0)["b"].input == 150
    # what it may have written unreported: up to offset 7, at its published output (200)
    g.retire("a", A, [Segment("mid", 0, 7, g.nodes["a"].published.output, 1)])
    assert "a" not in g.nodes and g.consumers("events") == []  # no longer a consumer
    assert g.compute(0)["b"].input == 150  # records 2..4 still unread
    report(g, "b", MAX, {"mid:0": 5})
    assert g.compute(0)["b"].input == 200  # the unreported tail, up to 7
    report(g, "b", MAX, {"mid:0": 7})
    pubs = g.compute(0)
    assert pubs["b"].input == MAX  # its only writer is retired and it read everything: finished
    assert g.retired["a"].segments == {}  # collected; the retirement stays known
    assert "a" not in pubs  # nothing published for it any more


def test_without_the_retirement_the_stopped_producer_holds_its_consumer() -> None:
    """The check the tests above make can fail: a stopped producer holds for ever."""
    g = graph(INJ, A, B, LIVE)
    report(g, "inj", 1000)
    report(g, "live", 5000)
    report(g, "a", 200, {"events:0": 3})
    report(g, "b", MAX)
    assert g.compute(0)["b"].input == 200
    report(g, "inj", 9000)
    assert g.compute(0)["b"].input == 200
    g.retire("a", A, [])
    assert g.compute(0)["b"].input == 5000  # the live writer of "mid" alone


def test_a_retired_computation_declared_again_comes_back_with_what_it_left() -> None:
    g = graph(INJ, A, B)
    report(g, "inj", 1000)
    report(g, "a", MAX, {"events:0": 3})
    report(g, "b", MAX)
    assert g.compute(0)["a"].output == 1000
    g.retire("a", A, [Segment("mid", 0, 4, 1000, 1)])
    g.compute(0)
    node = g.declare(A)  # someone started it again
    assert "a" not in g.retired
    assert node.published.output == 1000  # I-7: its values do not go back
    assert node.segments == {"mid:0": [Segment("mid", 0, 4, 1000, 1)]}  # still unread
    assert g.compute(0)["b"].input == 1000  # b waits for it again; what b published stays (I-7)


def test_a_topic_nobody_writes_still_holds_but_a_retired_writer_finishes_it() -> None:
    g = graph(B)
    report(g, "b", MAX)
    assert g.compute(0)["b"].input == MIN  # "mid": nobody declared writing it (yet)
    g.retire("a", A)  # retired without the authority ever knowing it
    assert g.compute(0)["b"].input == MAX


def test_the_journal_keeps_a_retirement_and_what_it_left() -> None:
    g = graph(INJ, A, B)
    report(g, "a", 300, {}, Segment("mid", 1, 9, 120, 2))
    g.compute(0)
    gone = g.retire("a", A, [Segment("mid", 0, 4, 300, 1)])
    gone.position = {0: "17-0", 1: "15-2"}
    raw = journal.encode(g, {("inj", 0): "5-0", ("b", 0): "6-1", ("b", 1): "4-0"})
    again = Graph()
    positions = journal.restore(again, raw, {"b": B, "inj": INJ})
    assert positions == {("inj", 0): "5-0", ("b", 0): "6-1", ("b", 1): "4-0"}
    assert journal.positions(raw) == positions
    assert set(again.nodes) == {"inj", "b"} and set(again.retired) == {"a"}
    r = again.retired["a"]
    assert (r.spec, r.position, r.published) == (A, {0: "17-0", 1: "15-2"}, gone.published)
    assert r.segments == gone.segments
    assert again.retired_producers("mid") == [r]


def test_a_journal_of_one_stream_per_node_restores_without_its_positions() -> None:
    """A journal written before report streams were per interval: its positions are of
    streams no longer written, so reading starts at the new streams' beginning."""
    old = {
        "positions": {"b": "6-1"},
        "nodes": {},
        "retired": {
            "a": {
                "spec": json.loads(A.encode()),
                "segments": {},
                "published": Published().__dict__,
                "position": "17-0",
            }
        },
    }
    again = Graph()
    assert journal.restore(again, json.dumps(old), {"b": B}) == {}
    assert again.retired["a"].position == {}


def test_a_retirement_record_decodes() -> None:
    raw = json.dumps({"at": 1_700_000_000_123, "spec": json.loads(A.encode()), "ends": {"t.x-y:1": 40}})
    rec = Retirement.decode("a", raw)
    assert rec == Retirement("a", 1_700_000_000_123, A, {("t.x-y", 1): 40})


def test_rekey_stages_are_found_by_name() -> None:
    specs = {n: A for n in ("a.b", "a-b-rekey-events", "a-b-rekey-other", "ab-rekey-x", "c")}
    assert rekey_stages("a.b", specs) == ["a-b-rekey-events", "a-b-rekey-other"]


# -- the scripts, on a real redis-server --------------------------------------------------


def ends(spec: NodeSpec) -> dict[str, int]:
    return {f"{t}:0": 7 for t in spec.outputs}


def silent(client: redis.Redis, name: str, ago_ms: int) -> None:
    """Make ``name``'s last sign of life ``ago_ms`` old (on Redis's clock)."""
    seconds, micros = client.time()
    now = seconds * 1000 + micros // 1000
    client.xadd(report_stream("ns", name, 0), {"r": "{}"}, id=f"{now - ago_ms}-0")
    client.hset(declared_key("ns"), name, now - ago_ms)


def test_a_declaration_is_timed_and_ends_a_retirement(client: redis.Redis) -> None:
    sink = RedisReportSink(client, "ns")
    client.hset(retired_key("ns"), "a", "{}")
    sink.declare(A)
    assert client.hget(topology_key("ns"), "a") == A.encode().encode()
    assert client.hget(retired_key("ns"), "a") is None
    seconds, _ = client.time()
    assert abs(int(client.hget(declared_key("ns"), "a") or 0) - seconds * 1000) < 2000


def test_retire_is_refused_while_workers_report_or_declare(client: redis.Redis) -> None:
    sink = RedisReportSink(client, "ns")
    sink.declare(A)
    retirer = Retirer(RedisRetireLog(client, "ns"), ends, "ns")
    with pytest.raises(RefusedError, match=r"workers of a declared themselves 0\.\d s ago; stop them first"):
        retirer.retire("a")
    silent(client, "a", 20_000)
    client.xadd(report_stream("ns", "a", 0), {"r": "{}"})  # a report, now
    with pytest.raises(RefusedError, match=r"workers of a reported 0\.\d s ago; stop them first \(or wait 1"):
        retirer.retire("a")
    assert client.hexists(topology_key("ns"), "a") and not client.exists(retired_key("ns"))


def test_retire_records_what_the_authority_needs_and_says_what_it_did(client: redis.Redis) -> None:
    for spec in (A, B, NodeSpec("a-rekey-events", "computation", ("events",), ("a-rekey-events",), 1)):
        client.hset(topology_key("ns"), spec.name, spec.encode())
        silent(client, spec.name, 16_000)
    outcome = Retirer(RedisRetireLog(client, "ns"), ends, "ns").retire("a")
    assert outcome.retired == ("a", "a-rekey-events") and outcome.consumers == ("b",)
    assert 16_000 <= outcome.quiet_ms < 18_000
    assert outcome.line().startswith("retired a and its rekey stage(s) a-rekey-events from namespace 'ns'")
    assert outcome.line().endswith("; b no longer waits for it beyond the records it left unread")
    assert set(client.hkeys(topology_key("ns"))) == {b"b"}
    rec = Retirement.decode("a", client.hget(retired_key("ns"), "a") or b"")
    assert rec.spec == A and rec.ends == {("mid", 0): 7}
    assert abs(rec.at_ms - outcome.now_ms) < 1000
    again = Retirer(RedisRetireLog(client, "ns"), ends, "ns").retire("a")
    assert again.already is not None and again.line().startswith("a was already retired")


def test_unknown_computations_and_injectors_are_refused(client: redis.Redis) -> None:
    client.hset(topology_key("ns"), "inj", INJ.encode())
    client.hset(topology_key("ns"), "b", B.encode())
    retirer = Retirer(RedisRetireLog(client, "ns"), ends, "ns")
    with pytest.raises(RefusedError, match=r"no computation 'nope' in namespace 'ns' \(known: b\)"):
        retirer.retire("nope")
    with pytest.raises(RefusedError, match="'inj' is an injector"):
        retirer.retire("inj")
    with pytest.raises(ConfigError, match="too short"):
        Retirer(RedisRetireLog(client, "ns"), ends, "ns", quiet_s=5)
