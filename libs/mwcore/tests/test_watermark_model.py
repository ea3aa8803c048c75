"""The authority's arithmetic (pure): backlog, interval map, injectors, monotonicity."""

from __future__ import annotations

from collections.abc import Sequence

from mwcore.controls import NegativeControls
from mwcore.watermarks.model import MAX, MIN, Graph, Options
from mwcore.watermarks.report_format import Grant, NodeSpec, Report, Segment, decode_entry


def pipeline(options: Options | None = None, processes: int = 1) -> Graph:
    g = Graph(options)
    g.declare(NodeSpec("inj", "injector", (), ("queries",), processes))
    g.declare(NodeSpec("a", "computation", ("queries",), ("counts",), 1))
    g.declare(NodeSpec("b", "computation", ("counts",), ("out",), 1))
    for name, n in (("inj", processes), ("a", 1), ("b", 1)):
        for i in range(n):
            g.nodes[name].grant(i, f"{name}-t{i}")
    return g


def report(
    g: Graph,
    name: str,
    oldest: int,
    index: int = 0,
    positions: dict[str, int] | None = None,
    segments: Sequence[Segment] = (),
    token: str | None = None,
) -> bool:
    r = Report(index, token or f"{name}-t{index}", oldest, dict(positions or {}), tuple(segments))
    return g.nodes[name].report(r, now_ms=0)


def test_nothing_moves_until_every_interval_has_reported() -> None:
    g = pipeline()
    report(g, "inj", 100)
    pubs = g.compute(0)
    assert pubs["inj"].output == 100
    assert pubs["a"].input == 100 and pubs["a"].output == MIN  # a has not reported
    report(g, "a", MAX)
    report(g, "b", MAX)
    pubs = g.compute(0)
    assert (pubs["a"].input, pubs["a"].output, pubs["b"].input) == (100, 100, 100)


def test_records_in_the_backlog_hold_the_consumer_until_it_commits_past_them() -> None:
    g = pipeline()
    report(g, "a", MAX)
    report(g, "b", MAX)
    report(g, "inj", 100, segments=[Segment("queries", 0, 10, 50, 10)])
    assert g.compute(0)["a"].input == 50
    report(g, "a", MAX, positions={"queries:0": 9})
    assert g.compute(0)["a"].input == 50  # one record still unread
    report(g, "a", MAX, positions={"queries:0": 10})
    assert g.compute(0)["a"].input == 100
    assert g.nodes["inj"].segments == {}  # the only consumer is past it: collected


def test_without_backlog_accounting_the_consumer_runs_ahead() -> None:
    g = pipeline(Options(controls=NegativeControls(ignore_backlog=True)))
    report(g, "a", MAX)
    report(g, "b", MAX)
    report(g, "inj", 100, segments=[Segment("queries", 0, 10, 50, 10)])
    assert g.compute(0)["a"].input == 100  # the negative control's early watermark


def test_a_production_holds_downstream_while_pending_then_as_backlog() -> None:
    g = pipeline()
    report(g, "inj", 1000)
    report(g, "b", MAX)
    report(g, "a", 200, positions={"queries:0": 5})  # a pending production at 200
    assert g.compute(0)["b"].input == 200
    # handed over in the same report that drops it from the oldest work
    report(g, "a", MAX, positions={"queries:0": 5}, segments=[Segment("counts", 0, 1, 200, 1)])
    assert g.compute(0)["b"].input == 200
    report(g, "b", MAX, positions={"counts:0": 1})
    assert g.compute(0)["b"].input == 1000


def test_stale_tokens_are_rejected_after_a_grant() -> None:
    g = pipeline()
    assert report(g, "a", 100)
    g.nodes["a"].grant(0, "a-new")
    assert not report(g, "a", 500)  # the former owner, after the grant: a zombie
    assert g.nodes["a"].rejected == 1
    assert g.nodes["a"].intervals[0].oldest == 100  # what it last said legitimately stays
    assert report(g, "a", 500, token="a-new")


def test_a_missing_injector_process_holds_the_watermark() -> None:
    g = pipeline(processes=2)
    report(g, "inj", 100, index=0)
    assert g.compute(0)["inj"].output == MIN  # process 1 never reported
    report(g, "inj", 120, index=1)
    assert g.compute(0)["inj"].output == 100
    g.nodes["inj"].report(Report(0, "inj-t0", 300), now_ms=9_000)  # process 1 goes silent at 120
    assert g.compute(9_000)["inj"].output == 120
    # the percentile watermark leaves a silent process out
    assert g.compute(10_000)["inj"].output_pct == 300


def test_published_values_never_go_back() -> None:
    g = pipeline()
    report(g, "inj", 100)
    report(g, "a", MAX)
    assert g.compute(0)["a"].input == 100
    g.declare(NodeSpec("late-joiner", "injector", (), ("queries",), 1))  # holds at MIN
    pubs = g.compute(0)
    assert pubs["a"].input == 100


def test_cycles_resolve_to_the_oldest_work_on_the_cycle() -> None:
    g = Graph()
    g.declare(NodeSpec("inj", "injector", (), ("x",), 1))
    g.declare(NodeSpec("a", "computation", ("x", "loop"), ("y",), 1))
    g.declare(NodeSpec("b", "computation", ("y",), ("loop",), 1))
    for n in ("inj", "a", "b"):
        g.nodes[n].grant(0, n)
    g.nodes["inj"].report(Report(0, "inj", 500), 0)
    g.nodes["a"].report(Report(0, "a", MAX), 0)
    g.nodes["b"].report(Report(0, "b", 300), 0)
    pubs = g.compute(0)
    assert pubs["a"].input == 300 and pubs["b"].output == 300


def test_percentile_ignores_the_oldest_one_percent_of_the_backlog() -> None:
    g = pipeline()
    report(g, "a", MAX)
    report(g, "b", MAX)
    segs = [Segment("queries", 0, 1, 10, 1), Segment("queries", 0, 1000, 90, 999)]
    report(g, "inj", 100, segments=segs)
    pubs = g.compute(0)
    assert pubs["a"].input == 10 and pubs["a"].input_pct == 90


def test_report_entries_round_trip() -> None:
    r = Report(3, "tok", 42, {"t:0": 7}, (Segment("t", 0, 7, 40, 2),), 99)
    assert decode_entry(r.encode()) == r
    assert decode_entry(Report(1, "x", MAX).encode()).oldest == MAX
    assert decode_entry('{"k":"grant","i":2,"t":"abc"}') == Grant(2, "abc")


def test_the_watermarks_view_shows_lag_and_held_values() -> None:
    from mwcore.tools.watermarks_view import render, rows
    from mwcore.watermarks.published import Watermarks

    table = rows(
        [Watermarks("a", "computation", 9_000, 8_000, 9_500, 8_000, 9_900), Watermarks("src", "injector")],
        10_000,
    )
    assert [r["name"] for r in table] == ["src", "a"]  # injectors first
    assert table[1]["lag_ms"] == 1000 and table[1]["pct_lag_ms"] == 500
    assert table[0]["lag_ms"] is None
    text = render(table)
    assert "held" in text and "1.00s" in text


def test_segments_wait_for_a_consumer_that_has_not_declared_itself_yet() -> None:
    g = Graph()
    g.declare(NodeSpec("inj", "injector", (), ("queries",), 1))
    g.nodes["inj"].grant(0, "t")
    for end in (5, 10):
        g.nodes["inj"].report(Report(0, "t", 100, {}, (Segment("queries", 0, end, 40 + end, 5),)), 0)
    g.compute(0)
    assert g.nodes["inj"].segments == {"queries:0": [Segment("queries", 0, 10, 45, 10)]}  # kept, merged
    g.declare(NodeSpec("late", "computation", ("queries",), (), 1))  # starts only now
    g.nodes["late"].grant(0, "c")
    g.nodes["late"].report(Report(0, "c", MAX), 0)
    assert g.compute(0)["late"].input == 45  # held by what it has yet to read


def test_a_node_known_only_from_the_journal_holds_its_input() -> None:
    g = Graph()
    g.declare(NodeSpec("ghost", "computation", (), (), 1))
    g.nodes["ghost"].grant(0, "t")
    g.nodes["ghost"].report(Report(0, "t", MAX), 0)
    assert g.compute(0)["ghost"].input == MIN


def test_a_stale_report_still_adds_its_segments() -> None:
    g = pipeline()
    report(g, "a", MAX)
    report(g, "b", MAX)
    report(g, "inj", 100)
    g.nodes["inj"].grant(0, "inj-new")
    assert not report(g, "inj", 900, segments=[Segment("queries", 0, 3, 70, 3)])  # the old process
    assert g.compute(0)["a"].input == 70  # its records in Kafka still hold the consumer


def test_a_consumer_far_behind_sees_its_watermark_follow_what_it_reads() -> None:
    """An injector reports a segment per second of event time (10 records each, 1 s
    apart) faster than its consumer reads; the consumer falls further and further
    behind, past the segments kept per partition (merged to stay bounded). Its input
    watermark must follow what it has read (never past an unread record), not wait
    until it has caught up."""
    g = Graph()
    g.declare(NodeSpec("inj", "injector", (), ("queries",), 1))
    g.declare(NodeSpec("c", "computation", ("queries",), (), 1))
    g.nodes["inj"].grant(0, "i")
    g.nodes["c"].grant(0, "c")
    read = 0
    behind: list[int] = []
    for second in range(1, 2001):
        seg = Segment("queries", 0, second * 10, second * 1000, 10)
        g.nodes["inj"].report(Report(0, "i", (second + 1) * 1000, {}, (seg,)), 0)
        read += 4 if second % 2 else 3  # 3.5 records a second of the 10 written: ever further behind
        g.nodes["c"].report(Report(0, "c", MAX, {"queries:0": read}), 0)
        wm = g.compute(0)["c"].input
        oldest_unread = (read // 10 + 1) * 1000  # the first record not read is in this second
        assert wm <= oldest_unread  # never early
        behind.append(oldest_unread - wm)
    assert len(g.nodes["inj"].segments["queries:0"]) <= 256  # bounded
    # live: the watermark trails what was read by a fraction of the backlog, not all of it
    backlog_s = 2000 - read // 10
    assert behind[-1] <= backlog_s * 1000 // 64, (behind[-1], backlog_s)
