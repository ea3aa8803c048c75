"""Re-keying: the extra hop for an input keyed differently from its stream.

Every key must have exactly one owner, and ownership follows Kafka partitions. So
when a computation keys an input by a function of the value rather than by the
stream's own key, the runtime runs a stateless *rekey stage*: a computation that
reads the original stream and produces each record, unchanged, under its new key to
``<computation>-rekey-<stream>``, which the computation then reads. The stage goes
through the same exactly-once path as any computation (its own intervals, positions
and dedup), and its productions carry ids derived from the input ids, so the
consumer drops any re-sent ones.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mwcore.api.computation import Computation, Input, KeyExtractor, Output
from mwcore.api.context import Context
from mwcore.api.record import Record
from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import ConfigError
from mwcore.transport.topics import rekey_stream


def rekey_stages(
    comp: type[Computation[Any]], controls: NegativeControls = SAFE
) -> list[type[Computation[Any]]]:
    """One stage class per input of ``comp`` that declares a key extractor.

    ``controls.rekey_keep_key`` (``MW_UNSAFE_REKEY_KEEP_KEY``, for a negative control
    only): the stages pass each record on under its own key, so a key of ``comp`` is not
    re-keyed to one partition and has as many owners as partitions it came from."""
    stages: list[type[Computation[Any]]] = []
    for inp in comp.inputs:
        if inp.key is not None:
            stages.append(_stage(comp, inp, inp.key, controls.rekey_keep_key))
    return stages


def _stage(
    comp: type[Computation[Any]], inp: Input, extract: KeyExtractor, keep_key: bool
) -> type[Computation[Any]]:
    if inp.schema is None:
        raise ConfigError(f"{comp.name}: re-keyed input {inp.stream!r} needs a schema")
    schema: str = inp.schema
    target = rekey_stream(comp.name, inp.stream)

    class RekeyStage(Computation[Any]):
        name = f"{comp.name}-rekey-{inp.stream}".replace(".", "-")[:63]
        # the stream's framing, read and written on: the computation reads the repartition
        # topic as it declared the stream
        # typed as the input is: the extractor takes the type the computation declared
        inputs: ClassVar[tuple[Input, ...]] = (
            Input(inp.stream, schema=schema, wire=inp.wire, read_also=inp.read_also, type=inp.type),
        )
        outputs: ClassVar[tuple[Output, ...]] = (
            Output(target, schema=schema, partitions=comp.partitions, wire=inp.wire, type=inp.type),
        )
        partitions = comp.partitions

        def process_record(self, ctx: Context[Any], record: Record) -> None:
            key = str(extract(record.value))
            ctx.produce(target, record.value, record.timestamp, key=key, headers=_passed_on(record))

    class KeepKeyStage(RekeyStage):  # the negative control's stage: no re-keying
        def process_record(self, ctx: Context[Any], record: Record) -> None:
            ctx.produce(target, record.value, record.timestamp, headers=_passed_on(record))

    stage = KeepKeyStage if keep_key else RekeyStage
    stage.__qualname__ = f"RekeyStage[{comp.name}.{inp.stream}]"
    return stage


def _passed_on(record: Record) -> list[tuple[str, bytes]]:
    """A record's user headers, as the stage passes them on (a header without a value
    cannot be produced: it is left out)."""
    return [(name, value) for name, value in record.headers if value is not None]
