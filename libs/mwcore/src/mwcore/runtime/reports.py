"""The watermark reports of one key interval (semantics section 4, I-7 and I-8).

A report shows the interval's committed state: its positions and its oldest work.
When productions wait for the commit witness (``witness_gated``), so does the report
of a checkpoint the witness does not cover yet (``Reports.draft``).
"""

from __future__ import annotations

from dataclasses import dataclass

from mwcore.api.clock import MAX_WATERMARK
from mwcore.api.record import TimeDomain
from mwcore.runtime.outbox import Outbox
from mwcore.runtime.timers import Timers
from mwcore.watermarks.report_format import Report


@dataclass(frozen=True, slots=True)
class ReportDraft:
    """A watermark report of a committed state; ``segment_keys`` are the stored segments
    it hands to the backlog (``Reports.reported`` once the report is written)."""

    commits: int  # the checkpoint it shows
    report: Report
    segment_keys: list[bytes]


class Reports:
    """An interval's reports, made of its outbox and timers (the interval's own)."""

    def __init__(self, index: int, token: str, outbox: Outbox, timers: Timers) -> None:
        self.index = index
        self.token = token
        self.outbox = outbox
        self.timers = timers
        self._held: ReportDraft | None = None  # waiting for the commit witness

    def oldest_timer(self) -> int:
        """The oldest pending timer or watermark hold (``TimeDomain.HOLD``: state the
        computation will produce from later), of any domain."""
        oldest = MAX_WATERMARK
        for domain in (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD):
            ts = self.timers.oldest(domain)
            if ts is not None and ts < oldest:
                oldest = ts
        return oldest

    def oldest_work(self, handing_over: bool = False, after: int = MAX_WATERMARK) -> int:
        """Oldest timestamp the interval may still produce at or hold back: pending
        productions not yet handed to the backlog, pending timers and holds, and
        ``after`` (what batches after the reported checkpoint may still produce at, that
        neither shows: ``Interval._after_durable``). Without ``after``, only meaningful
        when the interval is idle (an open batch's records are still in the input
        backlog, but a timer it fired is gone from the queue while its productions are
        not in the outbox yet)."""
        return min(self.outbox.oldest(handing_over), self.oldest_timer(), after)

    def witnessed(self, commits: int) -> bool:
        """The commit witness covers checkpoint ``commits`` (always, when not gated)."""
        return not self.outbox.gated or self.outbox.witnessed_commits >= commits

    def draft(
        self, commits: int, positions: dict[str, int], now_ms: int, after: int = MAX_WATERMARK
    ) -> ReportDraft | None:
        """The report of checkpoint ``commits`` at ``positions`` (``after``: see
        ``oldest_work``), or None while the
        commit witness does not cover it: then it is held, and ``witness`` hands it out
        once it does. Its segments leave the oldest work in the same report that hands
        them over. While a report is held no newer one is made: under load a newer
        commit is always ahead of the witness, and a held report replaced by each newer
        one would never be covered (the interval's reports starved)."""
        if self._held is not None:
            return None
        keys, segments = self.outbox.handed()
        report = Report(
            index=self.index,
            token=self.token,
            oldest=self.oldest_work(handing_over=True, after=after),
            positions=dict(positions),
            segments=tuple(segments),
            sent_ms=now_ms,
        )
        draft = ReportDraft(commits, report, keys)
        if self.witnessed(commits):
            return draft
        self._held = draft
        return None

    def reported(self, draft: ReportDraft) -> None:
        """The report is written: its segments are deleted by the next checkpoint."""
        self.outbox.reported(draft.segment_keys)

    def witness(self, commits: int) -> ReportDraft | None:
        """The commit witness covers ``commits``: release the productions it covers, and
        the held report if it now may be sent."""
        self.outbox.witness(commits)
        held = self._held
        if held is not None and held.commits <= commits:
            self._held = None
            return held
        return None
