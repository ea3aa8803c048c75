"""The hostile input of ``bench/hostile.py``: what is written to each topic and to the
injector's directory, and where each kind must be accounted for."""

from __future__ import annotations

import json
import random
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mwcore.api.ids import random_id
from mwcore.limits import MAX_SCHEMA_BYTES
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.transport.schema_topic import schemas_topic
from mwcore.transport.topics import topic_name
from mwcore.transport.watermark_topic import watermark_topic
from mwcore.watermarks.published import Watermarks
from services.injector.logs import file_name, record_line
from testbed import wire
from testbed.hostile import produce_raw

NS = "default"
FAR = 2**62  # a watermark past every record: each timer would fire at once


@dataclass
class Kind:
    """One kind of hostile input: how it is sent, and where it must be accounted for."""

    name: str
    where: str  # "input" (a dead letter at its offset), "control" (a rejection), "injector"
    reason: str  # the rejection's or the injector dead letter's reason ("" for input)
    records: int = 1
    placed: list[tuple[str, int, int]] = field(default_factory=list)  # input: (topic, partition, offset)


def _wm(name: str) -> bytes:
    return Watermarks(name, "computation", FAR, FAR, FAR, FAR, 1).encode()


def _fingerprint(doc: Any) -> bytes:
    from fastavro import parse_schema
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    canonical = to_parsing_canonical_form(parse_schema(doc, named_schemas={}))
    return struct.pack("<Q", int(fingerprint(canonical, "CRC-64-AVRO"), 16))


class Attacker:
    """Writes the hostile records of ``KINDS`` to the topics, noting where each went."""

    def __init__(self, stack: wire.Stack, registry: SchemaRegistry) -> None:
        self.bootstrap = stack.bootstrap
        self.stack = stack
        self.registry = registry
        self.kinds: dict[str, Kind] = {}

    def _serde(self, stream: str, schema: str) -> AvroSerde:
        """The stream's serde, in the framing the services use (the kit's default)."""
        return wire.serde(self.stack, self.registry, topic_name(NS, stream), schema)

    @staticmethod
    def _unknown(serde: AvroSerde, rng: random.Random) -> bytes:
        """A prefix of ``serde``'s framing naming a writer schema nobody has: a random
        fingerprint, or a registry id far above those given."""
        if serde.framing.wire == "confluent":
            return b"\x00" + struct.pack(">I", rng.randrange(1 << 30, 1 << 31))
        return b"\xc3\x01" + rng.randbytes(8)

    def _input(
        self, name: str, stream: str, records: Sequence[tuple[bytes | None, bytes | None]], **kw: Any
    ) -> None:
        topic = topic_name(NS, stream)
        placed = produce_raw(self.bootstrap, topic, records, **kw)
        kind = self.kinds.setdefault(name, Kind(name, "input", "", 0))
        kind.records += len(records)
        kind.placed += [(topic, p, o) for p, o in placed]

    def _control(self, name: str, topic: str, reason: str, key: bytes | None, value: bytes | None) -> None:
        produce_raw(self.bootstrap, topic, [(key, value)])
        self.kinds[name] = Kind(name, "control", reason)

    def inputs(self) -> None:
        """Records of ``queries``, ``window_counts`` and ``model_updates`` that no worker
        may take: each must be a dead letter."""
        q = self._serde("queries", "zeitgeist.Query")
        good = q.encode({"query": "x", "lang": "en", "user": 1, "source_file": "x.jsonl"})
        rng = random.Random(5)
        self._input("queries: junk bytes", "queries", [(b"k", rng.randbytes(40)) for _ in range(3)])
        self._input("queries: truncated Avro", "queries", [(b"k", good[: len(good) - 3])])
        self._input("queries: a key of 70,000 bytes", "queries", [(b"k" * 70_000, good)])
        self._input(
            "queries: a forged record id", "queries", [(b"x", good)], headers=[("mw-id", random_id())]
        )
        body = len(q.header)
        unknown = [(b"k", self._unknown(q, rng) + good[body:]) for _ in range(50)]
        self._input("queries: unknown writer schemas", "queries", unknown)
        window_counts = self._serde("window_counts", "zeitgeist.WindowCount")
        counts = window_counts.encode({"query": "x", "lang": "en", "bucket_start": 0, "count": 1})
        self._input("window_counts: junk bytes", "window_counts", [(b"x", counts[:12] + b"\xff" * 9)])
        other = self._unknown(window_counts, rng) + counts[len(window_counts.header) :]
        self._input("window_counts: an unknown writer schema", "window_counts", [(b"x", other)])
        model = self._serde("model_updates", "zeitgeist.ModelUpdate").encode(
            {
                "query": "query 1",
                "period_ms": 10**15,
                "profile": [5.0] * 24,
                "trained_until": FAR,
                "version": FAR,
            }
        )
        self._input("model_updates: a model no trainer makes", "model_updates", [(b"query 1", model)])

    def watermarks(self) -> None:
        """Records of the watermark topic not signed by the authority: each reader must
        reject them (a forged one would fire every timer early; a tombstone would retire
        the windower)."""
        topic = watermark_topic(NS)
        self._control("watermarks: not JSON", topic, "bad_mac", b"windower", b"\x00garbage")
        self._control("watermarks: nested too deep", topic, "bad_mac", b"windower", b"[" * 100_000)
        self._control("watermarks: a forged tombstone", topic, "bad_mac", b"windower", None)
        self._control("watermarks: forged under another key", topic, "bad_mac", b"x", _wm("windower"))
        self._control("watermarks: forged, far ahead", topic, "bad_mac", b"windower", _wm("windower"))

    def schemas(self) -> None:
        """Documents of the schemas topic that no reader may use."""
        topic = schemas_topic(NS)
        real = self.registry.latest("zeitgeist.Query")
        forged = json.loads(json.dumps(real.document))
        forged["fields"][0]["name"], forged["fields"][1]["name"] = "lang", "query"  # the fields swapped
        key = struct.pack("<Q", real.fingerprint)
        sizeless = {
            "type": "record",
            "name": "Sizeless",
            "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}],
        }
        self._control("schemas: nested too deep", topic, "not_json", b"\0" * 8, b"[" * 100_000)
        self._control("schemas: a key that is no fingerprint", topic, "bad_key", b"abc", b"{}")
        self._control(
            "schemas: forged under a real fingerprint",
            topic,
            "not_its_schema",
            key,
            json.dumps(forged).encode(),
        )
        self._control(
            "schemas: arrays of nothing",
            topic,
            "not_its_schema",
            _fingerprint(sizeless),
            json.dumps(sizeless).encode(),
        )
        oversized = b" " * (MAX_SCHEMA_BYTES + 1)
        self._control("schemas: over the size a schema may have", topic, "too_large", b"\1" * 8, oversized)


def hostile_files(directory: Path, second_ms: int) -> dict[str, Kind]:
    """The hostile files of one hostile second, and the kinds they are (each line or file
    an injector dead letter with the reason)."""
    far_ahead = int(time.time() * 1000) + 2 * 3_600_000  # the broker refuses it
    lines = {
        "log line: nested too deep": (b'{"ts": ' * 50_000 + b"1", "malformed"),
        "log line: a user of 2**64": (record_line(second_ms, "u", "en", 2**64).encode(), "malformed"),
        "log line: not UTF-8": (
            b'{"ts": %d, "query": "caf\xe9", "lang": "fr", "user": 1}' % second_ms,
            "malformed",
        ),
        "log line: 70,000 bytes": (record_line(second_ms, "x" * 70_000, "en", 1).encode(), "malformed"),
        "log line: dated two hours ahead": (
            record_line(far_ahead, "soon", "en", 1).encode(),
            "refused_bad_timestamp",
        ),
        "log line: dated 2**62 ms": (record_line(FAR, "never", "en", 1).encode(), "bad_timestamp"),
    }
    (directory / file_name(second_ms)).write_bytes(b"".join(raw + b"\n" for raw, _ in lines.values()))
    kinds = {name: Kind(name, "injector", reason) for name, (_, reason) in lines.items()}
    return kinds
