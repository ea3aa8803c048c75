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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from mwcore.runtime.interval import Interval
from mwcore.runtime.reports import ReportDraft
from mwcore.store.report_sink import ReportSink
from mwcore.watermarks.report_format import NodeSpec


class WatermarkReporter:
    def __init__(
        self,
        sink: ReportSink,
        spec: NodeSpec,
        now_ms: Callable[[], int],
        interval_ms: int = 50,
        declare_s: float = 10.0,
    ) -> None:
        self.sink = sink
        self.spec = spec
        self._now_ms = now_ms
        self._every_s = interval_ms / 1000
        self._declare_s = declare_s
        self._next_report = 0.0
        self._next_declare = 0.0
        self._wanted: set[int] = set()

    def declare(self) -> None:
        self.sink.declare(self.spec)

    def step(self, now: float, intervals: Mapping[int, Interval], force: bool = False) -> None:
        """Report what is due (``force``: every interval now, as a hand-over does)."""
        if now >= self._next_declare:  # again and again: survives a wiped topology
            self._next_declare = now + self._declare_s
            self.declare()
        if force:
            self._wanted = set(intervals)
        elif now >= self._next_report:
            if not self._wanted:
                self._wanted = set(intervals)
            self._next_report = now + self._every_s
        if not self._wanted:
            return
        ready: list[tuple[Interval, ReportDraft]] = []
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

    def send(self, ready: Sequence[tuple[Interval, ReportDraft]]) -> None:
        """Write the reports, then let their intervals delete what they handed over (if
        the write fails, nothing is deleted: they are reported again)."""
        if not ready:
            return
        self.sink.send(self.spec.name, [draft.report for _, draft in ready])
        for interval, draft in ready:
            interval.reports.reported(draft)
