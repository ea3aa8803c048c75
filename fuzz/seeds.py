"""The seed corpus: real records of each target's kind (as the kit and the services
write them) and a few known-hostile ones, framed as the targets read them. ``python -m
fuzz --seeds`` writes them to ``fuzz/corpus/<target>/<sha1>``; the fuzz tests check the
committed corpus holds them all."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

from fuzz.targets import _COUNT, _UPDATE, SECRET, frame, registry, serdes
from mwcore.api.record import Production, TimeDomain
from mwcore.api.signing import Signer
from mwcore.runtime import witness
from mwcore.serde.examples import example_value
from mwcore.store.checkpoint import TimerEntry
from mwcore.store.checkpoint_wire import encode_batch, encode_entry, field_of
from mwcore.watermarks.published import Watermarks
from services.injector.logs import record_line

CORPUS = Path(__file__).resolve().parent / "corpus"


def _avro() -> list[bytes]:
    out = []
    for i, serde in enumerate(serdes()):
        name = registry().names()[i]
        out.append(bytes([i]) + serde.encode(example_value(registry(), name)))
    return out


def _watermarks() -> list[bytes]:
    wm = Watermarks("windower", "computation", 5000, 4000, 6000, 4000, 1)
    inj = Watermarks("injector", "injector", 7000, 7000, 7000, 7000, 2)
    return [
        frame(b"windower", wm.encode()),
        frame(b"injector", inj.encode()),
        frame(b"x", wm.encode()),
        frame(b"windower", b"[" * 100),
        frame(b"windower", b'{"name": "windower", "kind": "computation", "input": "9"}'),
    ]


def _schemas() -> list[bytes]:
    out = []
    for serde, name in zip(serdes(), registry().names(), strict=True):
        sv = registry().latest(name)
        body = serde.encode(example_value(registry(), name))[10:]
        document = json.dumps(sv.document, sort_keys=True).encode()
        out.append(frame(struct.pack("<Q", sv.fingerprint), document, body))
    out.append(frame(b"\0" * 8, b'{"type": "array", "items": "null"}', b"\x80\x80\x80\x80\x08"))
    return out


def _checkpoints() -> list[bytes]:
    entry = TimerEntry("k\x00ey", "w1000", 999, TimeDomain.EVENT, b"s" * 16)
    batch = encode_batch(
        [
            Production(b"p" * 16, "out", b"k", b"value", 1000, (("mw-late-ms", b"5"),)),
            Production(b"q" * 16, "out", None, b"", 2000),
        ]
    )
    return [frame(field_of(entry.key, entry.tag), encode_entry(entry), batch)]


def _lines() -> list[bytes]:
    return [
        record_line(1000, "weather", "en", 7).encode(),
        record_line(2**62, "q", "de", 0).encode(),
        b'{"ts": ' * 100 + b"1",
        b'{"ts": 1, "query": "x", "lang": "en", "user": 18446744073709551616}',
        b'{"ts": 1, "query": "caf\xe9", "lang": "fr", "user": 1}',
    ]


def _witness() -> list[bytes]:
    return [
        witness.encode(12, Signer(SECRET), "t", 0).encode(),
        witness.encode(3).encode(),
        b"mw:-5",
        b"mw:\xd9\xa5",
    ]


def _models() -> list[bytes]:
    day = 60_000
    profile = struct.pack(">24d", *([5.0] * 24))
    counts = b"".join(_COUNT.pack(b, c) for b, c in ((1000, 5), (2000, 0), (10**15, 3)))
    return [
        _UPDATE.pack(day, 900, 900, 1000, 24) + profile + counts,
        _UPDATE.pack(10**15, 2**62, 2**62, 1000, 24) + profile + counts,
    ]


def seeds() -> dict[str, list[bytes]]:
    return {
        "avro_record": _avro(),
        "watermark_record": _watermarks(),
        "schema_document": _schemas(),
        "checkpoint_entries": _checkpoints(),
        "query_log_line": _lines(),
        "witness_metadata": _witness(),
        "model_update": _models(),
    }


def corpus_path(target: str, seed: bytes) -> Path:
    return CORPUS / target / hashlib.sha1(seed).hexdigest()


def write_corpus() -> dict[str, int]:
    written = {}
    for target, items in seeds().items():
        (CORPUS / target).mkdir(parents=True, exist_ok=True)
        for seed in items:
            corpus_path(target, seed).write_bytes(seed)
        written[target] = len(items)
    return written
