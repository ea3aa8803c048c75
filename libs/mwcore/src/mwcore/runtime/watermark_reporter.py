"""A worker's watermark reports to the authority (semantics section 4).

Every ``interval_ms`` each owned interval's last durable checkpoint is reported, as soon
as ``Interval.reportable``: with no open batch (its committed state is then its soft
state), or, with overlapping commits, once its owner made one durable. A report hands
over the segments of acknowledged productions that durable checkpoints stored (those
acknowledged since still count as oldest work); they leave the oldest work in the report
that hands them to the backlog, and are deleted from the checkpoint only once that
report is written. A
report shows only witnessed state (``witness.py``): one made before the witness covers
its checkpoint is held by its interval until it does (``reports.py``).

The worker also declares its computation (what it reads and writes) at start and every
``declare_s``: the authority picks up new computations from declarations, and
``mw retire`` takes them for a sign of life.

With overlapping commits (the default) the reports are written in the
background, as the checkpoints are: one write at a time on a thread of its own, its
result taken at a later step. While a write is in flight no new report is drafted (it
would hand over again the segments the one in flight hands over); reports released
meanwhile by the witness wait for it, so each interval's reports are written in order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import structlog

from mwcore.runtime.interval import Interval
from mwcore.runtime.reports import ReportDraft
from mwcore.store.report_sink import ReportSink
from mwcore.watermarks.report_format import NodeSpec

log = structlog.get_logger("mwcore.reports")

Ready = list[tuple[Interval, ReportDraft]]


class WatermarkReporter:
    def __init__(
        self,
        sink: ReportSink,
        spec: NodeSpec,
        now_ms: Callable[[], int],
        interval_ms: int = 50,
        declare_s: float = 10.0,
        background: bool = False,
    ) -> None:
        self.sink = sink
        self.spec = spec
        self._now_ms = now_ms
        self._every_s = interval_ms / 1000
        self._declare_s = declare_s
        self._next_report = 0.0
        self._next_declare = 0.0
        self._wanted: set[int] = set()
        self._background = background
        self._writer: ThreadPoolExecutor | None = None  # made at the first write sent on it
        self._queued: Ready = []  # to write once the write in flight is taken
        self._in_flight: tuple[Ready, Future[None]] | None = None

    def declare(self) -> None:
        self.sink.declare(self.spec)

    def step(self, now: float, intervals: Mapping[int, Interval], force: bool = False) -> None:
        """Report what is due (``force``: every interval now, and wait until written, as
        a hand-over does)."""
        if now >= self._next_declare:  # again and again: survives a wiped topology
            self._next_declare = now + self._declare_s
            self.declare()
        if force:
            self.flush()
            self._wanted = set(intervals)
        else:
            self._take(wait=False)
            if now >= self._next_report:
                if not self._wanted:
                    self._wanted = set(intervals)
                self._next_report = now + self._every_s
        if not self._wanted or self._in_flight is not None:
            return  # (a new draft would hand over again what the one in flight hands over)
        ready: Ready = []
        now_ms = self._now_ms()
        for index in list(self._wanted):
            interval = intervals.get(index)
            if interval is None:
                self._wanted.discard(index)
            elif interval.reportable():
                draft = interval.report(now_ms)  # None: held until witnessed
                if draft is not None:
                    ready.append((interval, draft))
                self._wanted.discard(index)
        self.send(ready)
        if force:
            self.flush()

    def send(self, ready: Ready) -> None:
        """Write the reports (in the background: after the write in flight, and taken
        by a later ``step``), then let their intervals delete what they handed over (if
        the write fails, nothing is deleted: they are reported again)."""
        self._queued.extend(ready)
        self._take(wait=False)

    def flush(self) -> None:
        """Wait until every report sent is written."""
        while self._in_flight is not None or self._queued:
            self._take(wait=True)

    def close(self, timeout: float = 30) -> None:
        """Stopping: let the write in flight end (or fail), drop what is queued (the
        next owner reports it), end the thread."""
        flight, self._in_flight, self._queued = self._in_flight, None, []
        if flight is not None:
            try:
                flight[1].result(timeout=timeout)
            except Exception as exc:
                log.warning("report_in_flight_failed", error=str(exc))
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=False)

    def _take(self, wait: bool) -> None:
        """Take the write in flight, if done (``wait``: waiting for it), then send what
        is queued. Raises what the write raised."""
        flight = self._in_flight
        if flight is not None:
            if not (wait or flight[1].done()):
                return
            self._in_flight = None
            flight[1].result()
            self._written(flight[0])
        if not self._queued:
            return
        ready, self._queued = self._queued, []
        reports = [draft.report for _, draft in ready]
        if not self._background:
            self.sink.send(self.spec.name, reports)
            self._written(ready)
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="mw-report")
        self._in_flight = (ready, self._writer.submit(self.sink.send, self.spec.name, reports))

    @staticmethod
    def _written(ready: Ready) -> None:
        for interval, draft in ready:
            interval.reports.reported(draft)
