"""The watermark-lag benchmark's pipeline: three pass-through stages (each adds only
its own delay: consume, commit, report, hand over)."""

from __future__ import annotations

from mwcore import Computation, Context, Input, Output, Record


class Stage1(Computation):
    name = "stage1"
    inputs = (Input("events", schema="mw.bench.Event"),)
    outputs = (Output("events1", schema="mw.bench.Event"),)

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("events1", record.value, record.timestamp)


class Stage2(Computation):
    name = "stage2"
    inputs = (Input("events1", schema="mw.bench.Event"),)
    outputs = (Output("events2", schema="mw.bench.Event"),)

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("events2", record.value, record.timestamp)


class Stage3(Computation):
    name = "stage3"
    inputs = (Input("events2", schema="mw.bench.Event"),)
    outputs = (Output("events3", schema="mw.bench.Event"),)

    def process_record(self, ctx: Context, record: Record) -> None:
        ctx.produce("events3", record.value, record.timestamp)
