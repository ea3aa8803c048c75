"""Where one computation's worker reads and writes in a namespace: its input topics
(re-keyed inputs read their repartition topic), output topics, dead-letter and late
topics, its consumer group, and the codecs of each, in each stream's framing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mwcore.api.codecs import AvroCodec
from mwcore.api.computation import Computation, Input, Output, state_codec_of
from mwcore.runtime.intake import InputBinding
from mwcore.runtime.parts import Core
from mwcore.serde import typed
from mwcore.serde.avro import AvroSerde, SchemaRegistry, SchemaVersion
from mwcore.serde.framing import SINGLE_OBJECT, Framing, Wire
from mwcore.serde.typed import Typed
from mwcore.transport.topics import dead_letter_stream, ensure_topics, late_stream, rekey_stream, topic_name
from mwcore.watermarks.report_format import NodeSpec


def input_topics(comp: type[Computation[Any]] | Computation[Any], namespace: str) -> dict[str, str]:
    """topic -> stream for every input (re-keyed inputs read their repartition topic)."""
    out: dict[str, str] = {}
    for inp in comp.inputs:
        stream = inp.stream if inp.key is None else rekey_stream(comp.name, inp.stream)
        out[topic_name(namespace, stream)] = inp.stream
    return out


def stream_types(
    comp: type[Computation[Any]] | Computation[Any], registry: SchemaRegistry
) -> dict[str, Typed]:
    """stream -> its type and converters, for each stream that declares a ``type``,
    checked against its schema (``ConfigError``, one line, where it does not
    match: ``serde/typed.py``)."""
    out: dict[str, Typed] = {}
    streams: tuple[Input | Output, ...] = (*comp.inputs, *comp.outputs)
    for s in streams:
        if s.type is not None:
            what = f"{comp.name}: {s.stream!r}"
            out[s.stream] = typed.check(s.type, registry.latest(s.schema or "").parsed, what)
    return out


@dataclass(frozen=True)
class Layout:
    comp: Computation[Any]
    namespace: str
    group: str
    inputs: dict[str, str]  # topic -> stream
    outputs: dict[str, str]  # stream -> topic
    dead_letters: str  # topic
    late: str  # topic ("" unless the computation routes late records)

    @classmethod
    def of(cls, comp: Computation[Any], namespace: str) -> Layout:
        late = topic_name(namespace, late_stream(comp.name)) if comp.options.late == "route" else ""
        return cls(
            comp=comp,
            namespace=namespace,
            group=topic_name(namespace, f"mw.{comp.name}"),
            inputs=input_topics(comp, namespace),
            outputs={o.stream: topic_name(namespace, o.stream) for o in comp.outputs},
            dead_letters=topic_name(namespace, dead_letter_stream(comp.name)),
            late=late,
        )

    def topic_partitions(self) -> dict[str, int]:
        """Every topic it reads and writes, with the computation's partition counts."""
        n = self.comp.partitions
        topics = dict.fromkeys(self.inputs, n)
        for out in self.comp.outputs:
            topics[self.outputs[out.stream]] = out.partitions or n
        topics[self.dead_letters] = 1
        if self.late:
            topics[self.late] = 1
        return topics

    def create_topics(self, bootstrap: str) -> None:
        ensure_topics(bootstrap, self.topic_partitions())

    def wires(self, wire: Wire, read_also: Wire | None) -> dict[str, tuple[Wire, Wire | None]]:
        """topic -> (the framing written and read, the other one read too) of each input
        and output topic, as its stream declares (``wire``, ``read_also``: the process's
        defaults, for streams that declare none)."""
        out: dict[str, tuple[Wire, Wire | None]] = {}
        for inp in self.comp.inputs:
            own = inp.wire or wire
            also = inp.read_also or read_also
            for topic, stream in self.inputs.items():
                if stream == inp.stream:
                    out[topic] = (own, None if also == own else also)
        for o in self.comp.outputs:
            own = o.wire or wire
            also = None if read_also == own else read_also
            out[self.outputs[o.stream]] = (own, also)
        return out

    def schemas(self, registry: SchemaRegistry) -> dict[str, SchemaVersion]:
        """topic -> the schema each input topic is read with and each output topic written
        with: what the worker registers under the subjects of those framed ``"confluent"``
        (an input's reader schema: its dead letters are written with it, and the registry
        checks it reads what the writers write)."""
        names = {
            t: inp.schema or "" for inp in self.comp.inputs for t, s in self.inputs.items() if s == inp.stream
        }
        names.update({self.outputs[o.stream]: o.schema for o in self.comp.outputs})
        return {t: registry.latest(name) for t, name in names.items()}

    def types(self, registry: SchemaRegistry) -> dict[str, Typed]:
        return stream_types(self.comp, registry)

    def bindings(
        self, registry: SchemaRegistry, core: Core, framings: Mapping[str, Framing] | None = None
    ) -> dict[str, InputBinding]:
        """topic -> how its messages become records (decoded by ``core``'s decoder, into
        the input's ``type`` where it has one), in each topic's framing (default:
        single-object)."""
        out: dict[str, InputBinding] = {}
        types = self.types(registry)
        for inp in self.comp.inputs:
            for topic, stream in self.inputs.items():
                if stream == inp.stream:
                    framing = (framings or {}).get(topic, SINGLE_OBJECT)
                    serde = AvroSerde(registry, inp.schema or "", framing=framing)
                    t = types.get(inp.stream)
                    write = None if t is None else t.write
                    out[topic] = InputBinding(inp.stream, serde, core.decoder(serde, t), write)
        return out

    def encoders(
        self, registry: SchemaRegistry, core: Core, framings: Mapping[str, Framing] | None = None
    ) -> dict[str, tuple[str, Callable[[Any], bytes]]]:
        """stream -> (topic, encode) of every output (encoded by ``core``'s encoder, from
        the output's ``type`` where it has one)."""
        out = {}
        types = self.types(registry)
        for o in self.comp.outputs:
            topic = self.outputs[o.stream]
            serde = AvroSerde(registry, o.schema, framing=(framings or {}).get(topic, SINGLE_OBJECT))
            out[o.stream] = (topic, core.encoder(serde, types.get(o.stream)))
        return out

    def writer_schemas(self, registry: SchemaRegistry) -> list[SchemaVersion]:
        """Every schema the worker encodes with: its outputs', its inputs' (a record that
        fails is dead-lettered re-encoded with its reader schema) and its state's."""
        comp = self.comp
        names = [o.schema for o in comp.outputs] + [i.schema for i in comp.inputs if i.schema]
        codec = state_codec_of(comp)
        if isinstance(codec, AvroCodec):
            names.append(codec.schema)
        return [registry.latest(name) for name in dict.fromkeys(names)]

    def spec(self) -> NodeSpec:
        """What the computation reads and writes, for the watermark authority (inputs that
        do not hold its watermark left out)."""
        comp = self.comp
        outputs = [*self.outputs.values(), self.dead_letters] + ([self.late] if self.late else [])
        side = {inp.stream for inp in comp.inputs if not inp.watermark}
        inputs = tuple(t for t, stream in self.inputs.items() if stream not in side)
        return NodeSpec(comp.name, "computation", inputs, tuple(outputs), comp.partitions)
