"""Watermark reports written in the background (``runtime/watermark_reporter.py``, with
overlapping commits): the worker's loop does not wait for Redis, each handed-over
segment reaches the authority's stream once and in order, and a failed write deletes
nothing. Written to a real redis-server through ``RedisReportSink``; the intervals are
stand-ins that hand over, as an outbox does, every segment not yet reported."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import redis

from mwcore.runtime.interval import Interval
from mwcore.runtime.reports import ReportDraft
from mwcore.runtime.watermark_reporter import WatermarkReporter
from mwcore.store.report_sink import RedisReportSink
from mwcore.watermarks.report_format import NodeSpec, Report, Segment, decode_entry, report_stream

NS = "reporter-test"
SPEC = NodeSpec(name="windower", kind="computation", inputs=("in",), outputs=("out",), intervals=1)


class Handing:
    """An interval whose outbox stores a new acknowledged segment now and then: each
    report hands over every stored segment; ``reported`` deletes them."""

    def __init__(self) -> None:
        self.stored: dict[bytes, Segment] = {}
        self.drafts = 0
        self.reports = self

    def store(self, n: int) -> None:
        self.stored[b"seg%d" % n] = Segment("out", 0, n + 1, n, 1)

    def reportable(self) -> bool:
        return True

    def report(self, now_ms: int) -> ReportDraft:
        self.drafts += 1
        keys = list(self.stored)
        segments = tuple(self.stored[k] for k in keys)
        return ReportDraft(self.drafts, Report(0, "t", 0, segments=segments, sent_ms=now_ms), keys)

    def reported(self, draft: ReportDraft) -> None:
        for key in draft.segment_keys:
            self.stored.pop(key, None)


class Gated(RedisReportSink):
    """Writes once ``opened`` (or fails, when ``fail`` is set)."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client, NS)
        self.opened = threading.Event()
        self.opened.set()
        self.fail = False
        self.writes = 0

    def send(self, name: str, reports: Sequence[Report]) -> None:
        self.opened.wait(10)
        if self.fail:
            raise redis.ConnectionError("refused")
        super().send(name, reports)
        self.writes += 1


def written(client: redis.Redis) -> list[Report]:
    entries = client.xrange(report_stream(NS, SPEC.name, 0))
    reports = [decode_entry(fields[b"r"]) for _, fields in entries]
    return [r for r in reports if isinstance(r, Report)]


def reporter(sink: Gated) -> WatermarkReporter:
    return WatermarkReporter(sink, SPEC, lambda: 1, interval_ms=0, background=True)


def test_the_loop_does_not_wait_for_a_report_and_a_hand_over_does(client: redis.Redis) -> None:
    sink = Gated(client)
    r = reporter(sink)
    interval = Handing()
    intervals: dict[int, Interval] = {0: interval}  # type: ignore[dict-item]
    interval.store(0)
    sink.opened.clear()
    r.step(1.0, intervals)  # drafted and sent; the write waits for the gate
    r.step(2.0, intervals)
    assert sink.writes == 0 and interval.drafts == 1  # returned; nothing drafted meanwhile
    assert interval.stored  # not deleted before its report is written
    sink.opened.set()
    r.step(3.0, intervals, force=True)  # waits for the one in flight and its own
    assert sink.writes == 2 and not interval.stored
    assert [len(x.segments) for x in written(client)] == [1, 0]
    r.close()


def test_each_segment_reaches_the_stream_once_and_in_order(client: redis.Redis) -> None:
    sink = Gated(client)
    r = reporter(sink)
    interval = Handing()
    intervals: dict[int, Interval] = {0: interval}  # type: ignore[dict-item]
    for n in range(300):
        interval.store(n)
        r.step(float(n), intervals)
    r.step(1e6, intervals, force=True)
    handed = [s.end - 1 for x in written(client) for s in x.segments]
    assert handed == list(range(300))  # once each, in order
    assert len(written(client)) < 300  # (writes were in flight while segments came)
    r.close()


def test_a_failed_write_deletes_nothing_and_its_segments_are_handed_over_again(
    client: redis.Redis,
) -> None:
    sink = Gated(client)
    r = reporter(sink)
    interval = Handing()
    intervals: dict[int, Interval] = {0: interval}  # type: ignore[dict-item]
    interval.store(0)
    sink.fail = True
    r.step(1.0, intervals)
    with pytest.raises(redis.ConnectionError):
        r.flush()  # what the write raised, to the loop (the worker aborts)
    assert list(interval.stored) == [b"seg0"]
    sink.fail = False
    r.step(2.0, intervals, force=True)
    assert [[s.end for s in x.segments] for x in written(client)] == [[1]]
    assert not interval.stored
    r.close()
