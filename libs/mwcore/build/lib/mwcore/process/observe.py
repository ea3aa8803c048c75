"""What each kind of process exposes as Prometheus metrics (see ``mwcore.process.metrics``).

Workers: records in and out, timers fired, commits, fenced commits, duplicates
dropped, dead letters, late records, intervals owned, input watermark and its lag
behind wall time, batch and commit latency. The watermark authority: reports, grants,
rejected reports, watermarks published, journal writes, gaps, retirements taken up,
retired computations declared again, and each computation's published watermark lag.
Injectors: records sent, late, dead letters, failed sends and the watermark they
promised. Every process: the control records its readers skipped
(``mw_rejected_records_total{topic,reason}``, ``transport/rejections.py``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from prometheus_client.core import Metric

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.injector.injector import Injector
from mwcore.process.metrics import ProcessMetrics, counter, gauge
from mwcore.runtime.worker import Worker
from mwcore.transport.rejections import REJECTED
from mwcore.watermarks.authority import Authority


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _watermark(labels: dict[str, str], wm: int, now_ms: int) -> Iterable[Metric]:
    """The watermark and its lag, only while it is a time (not held at the start of
    time nor past the end of it)."""
    if MIN_WATERMARK < wm < MAX_WATERMARK:
        yield gauge("mw_watermark_ms", "Low watermark (event time, ms since the epoch)", labels, wm)
        yield gauge(
            "mw_watermark_lag_seconds", "Wall time minus the low watermark", labels, (now_ms - wm) / 1000
        )


def instrument_rejections(metrics: ProcessMetrics) -> None:
    """The control records this process's readers skipped, by topic and reason."""

    def families() -> Iterable[Metric]:
        for (topic, reason), n in sorted(REJECTED.counts.items()):
            yield counter(
                "mw_rejected_records_total",
                "Control records skipped as malformed, out of range or not authentic",
                {"topic": topic, "reason": reason},
                n,
            )

    metrics.collect_with(families)


WORKER_COUNTERS = (
    ("records", "mw_records_in_total", "Input records processed (duplicates excluded)"),
    ("productions", "mw_records_out_total", "Records sent to output streams (re-sends included)"),
    ("timers_fired", "mw_timers_fired_total", "Timers fired"),
    ("commits", "mw_commits_total", "Checkpoints committed"),
    ("fenced", "mw_fenced_commits_total", "Commits refused because another owner holds the interval"),
    ("redone", "mw_batches_redone_total", "Open batches redone, each call's state encoded at once"),
    ("duplicates", "mw_duplicates_dropped_total", "Input records dropped as already processed"),
    ("dead_letters", "mw_dead_letters_total", "Records sent to the dead-letter stream"),
    ("late_records", "mw_late_records_total", "Input records behind the watermark when they arrived"),
    ("late_productions", "mw_late_productions_total", "Productions stamped earlier than their cause"),
)


def instrument_workers(metrics: ProcessMetrics, workers: list[Worker]) -> None:
    batch = metrics.histogram(
        "mw_batch_seconds", "From a batch's first record to its commit", ("computation",)
    )
    commit = metrics.histogram("mw_commit_seconds", "Duration of the commit script", ("computation",))
    for w in workers:
        b, c = batch.labels(w.comp.name), commit.labels(w.comp.name)

        def observe(batch_s: float, commit_s: float, b: object = b, c: object = c) -> None:
            b.observe(batch_s)  # type: ignore[attr-defined]
            c.observe(commit_s)  # type: ignore[attr-defined]

        w.on_commit = observe

    def families() -> Iterable[Metric]:
        now_ms = _now_ms()
        for w in workers:
            labels = {"computation": w.comp.name}
            for field, name, doc in WORKER_COUNTERS:
                yield counter(name, doc, labels, getattr(w.counters, field))
            yield gauge("mw_intervals_owned", "Key intervals this process owns", labels, len(w.intervals))
            yield from _watermark(labels, w.input_watermark, now_ms)

    metrics.collect_with(families)


AUTHORITY_COUNTERS = (
    ("reports", "mw_authority_reports_total", "Reports applied"),
    ("grants", "mw_authority_grants_total", "Interval grants seen"),
    ("rejected", "mw_authority_rejected_reports_total", "Reports refused (stale token)"),
    ("published", "mw_authority_published_total", "Watermark records published"),
    ("journaled", "mw_authority_journal_writes_total", "Journal writes (before each publish)"),
    ("gaps", "mw_authority_gaps_total", "Report streams trimmed past the authority's position"),
    ("retired", "mw_authority_retired_total", "Computations retired (mw retire) the authority took up"),
    ("revived", "mw_authority_revived_total", "Retired computations declared again (started anew)"),
)


def instrument_authority(metrics: ProcessMetrics, authority: Authority) -> None:
    def families() -> Iterable[Metric]:
        labels = {"shard": str(authority.cfg.shard)}
        for field, name, doc in AUTHORITY_COUNTERS:
            yield counter(name, doc, labels, getattr(authority.counters, field))
        now_ms = _now_ms()
        for name, wm in sorted(authority.latest().items()):
            yield from _watermark({"computation": name}, wm, now_ms)

    metrics.collect_with(families)


def instrument_injector(metrics: ProcessMetrics, injector: Injector) -> None:
    def families() -> Iterable[Metric]:
        labels = {"injector": injector.name, "index": str(injector.index)}
        yield counter("mw_injector_records_out_total", "Records sent", labels, injector.sent)
        yield counter(
            "mw_injector_late_total", "Records sent behind the promised watermark", labels, injector.late
        )
        yield counter(
            "mw_dead_letters_total", "Records sent to the dead-letter stream", labels, injector.dead_letters
        )
        yield counter("mw_injector_send_errors_total", "Sends that failed (retried)", labels, injector.errors)
        yield from _watermark({"computation": injector.name}, injector.reported, _now_ms())

    metrics.collect_with(families)
