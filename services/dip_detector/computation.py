"""The dip detector (paper section 2, figure 3): window counts and model updates in,
anomalies out, keyed by query.

Each query's count model lives in its state (``services/dip_detector/model.py``). A
count that arrives is final: it is fed at once (a spike is reported on the count that
shows it). Quiet buckets need the low watermark: a timer at the end of the next
bucket fires once the input watermark is past it, when every count of that bucket has
arrived, so a bucket nobody searched is known to be 0. ``model_updates`` is a side
input: it does not hold the watermark (the batch job publishes only now and then).

Anomalies are episodes (``phase`` OPEN, then CLOSE). Settings: ``MW_DETECTOR_DAY_S``
(the daily rhythm's period, seconds) and ``MW_DETECTOR_BUDGET`` (expected false
episodes per query per day), read when the computation is created (or given).
"""

from __future__ import annotations

from typing import Any

from mwcore import Computation, Context, Input, Output, Record, TimeDomain, Timer
from services.dip_detector.model import BUCKET_MS, QueryModel
from services.dip_detector.settings import DetectorSettings


class DipDetector(Computation[dict[str, Any]]):
    name = "dip_detector"
    inputs = (
        Input("window_counts", schema="zeitgeist.WindowCount"),
        Input("model_updates", schema="zeitgeist.ModelUpdate", watermark=False),
    )
    outputs = (Output("anomalies", schema="zeitgeist.Anomaly"),)

    def __init__(self, settings: DetectorSettings | None = None) -> None:
        settings = settings or DetectorSettings.load()
        self.day, self.budget = settings.detector_day_s, settings.detector_budget

    def _model(self, ctx: Context[dict[str, Any]]) -> QueryModel:
        raw = ctx.state.get()
        return QueryModel(day=self.day, budget=self.budget) if raw is None else QueryModel.from_json(raw)

    def process_record(self, ctx: Context[dict[str, Any]], record: Record) -> None:
        model = self._model(ctx)
        v = record.value
        if record.stream == "model_updates":
            events = model.update_profile(
                v["profile"], v["period_ms"], v["version"], v["trained_until"], record.timestamp, _clock(ctx)
            )
            self._emit(ctx, events, record.timestamp)
            ctx.state.set(model.to_json())
            return
        model.lang = v["lang"]
        before = model.next_bucket
        self._emit(ctx, model.on_count(v["bucket_start"], v["count"]), record.timestamp)
        self._arm(ctx, model, before)
        ctx.state.set(model.to_json())

    def process_timer(self, ctx: Context[dict[str, Any]], timer: Timer) -> None:
        model = self._model(ctx)
        self._emit(ctx, model.evaluate_until(timer.timestamp + 1 - BUCKET_MS), timer.timestamp)
        self._arm(ctx, model, None)
        ctx.state.set(model.to_json())

    def _arm(self, ctx: Context[dict[str, Any]], model: QueryModel, before: int | None) -> None:
        """One timer per query, at the end of the next bucket to evaluate."""
        if model.next_bucket is not None and model.next_bucket != before:
            ctx.timers.set("eval", model.next_bucket + BUCKET_MS - 1, TimeDomain.EVENT)

    def _emit(self, ctx: Context[dict[str, Any]], anomalies: list[dict[str, Any]], ts: int) -> None:
        for a in anomalies:
            ctx.produce("anomalies", {"query": ctx.key, **a}, ts)


def _clock(ctx: Context[dict[str, Any]]) -> int | None:
    """The wall clock a model's version is bounded by; None in a batch run over the
    archive (``mw batch``, Spark's ``KeyRunner``: a replay of the past has no wall clock,
    its context's time is 0), where the record's time alone bounds it, so the batch run
    takes the models the live detector took."""
    now = ctx.now_ms()
    return now if now > 0 else None
