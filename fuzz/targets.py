"""The fuzz targets: every decoder a record (or a query-log line, or a stored entry)
reaches, each fed arbitrary bytes. A target may refuse its input only with the errors
it names (the kit's own: a dead letter or a rejection follows); anything else that
escapes is a crash, and so is an input that takes more than libFuzzer's ``-timeout``
or memory past ``-rss_limit_mb``.

Inputs with several parts are framed: each part but the last is a 2-byte big-endian
length and that many bytes (``frame`` writes them).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from mwcore.api.signing import Signer
from mwcore.errors import CorruptStateError, RejectedRecord, SerializationError
from mwcore.limits import MAX_KEY_BYTES
from mwcore.runtime import witness
from mwcore.serde.avro import HEADER_LEN, MAGIC, AvroSerde, SchemaRegistry, decode_any
from mwcore.store.checkpoint_wire import decode_batch, decode_entry
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.watermarks.published import Watermarks
from services.dip_detector.model import QueryModel
from services.injector.logs import MAX_LINE_BYTES, parse_line

ROOT = Path(__file__).resolve().parents[1]
SECRET = "the fuzz targets' pipeline secret"


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], object]
    allowed: tuple[type[BaseException], ...]  # how it may refuse an input
    doc: str


def frame(*parts: bytes) -> bytes:
    """``parts`` as one input: each but the last prefixed by its 2-byte length."""
    return b"".join(struct.pack(">H", len(p)) + p for p in parts[:-1]) + parts[-1]


def unframe(data: bytes, n: int) -> list[bytes]:
    """The ``n`` parts of ``data`` (short ones empty where it ends early)."""
    out, pos = [], 0
    for _ in range(n - 1):
        (size,) = struct.unpack_from(">H", data, pos) if len(data) >= pos + 2 else (0,)
        pos = min(len(data), pos + 2)
        out.append(data[pos : pos + size])
        pos = min(len(data), pos + size)
    out.append(data[pos:])
    return out


@cache
def registry() -> SchemaRegistry:
    return SchemaRegistry.from_directory(ROOT / "schemas")


@cache
def serdes() -> tuple[AvroSerde, ...]:
    return tuple(AvroSerde(registry(), name) for name in registry().names())


def avro_record(data: bytes) -> None:
    """A value as a worker decodes it: the first byte picks the reader schema (every
    schema of the repository), the rest is the value (header and body)."""
    if data:
        serdes()[data[0] % len(serdes())].decode(data[1:])


def watermark_record(data: bytes) -> None:
    """A record of ``mw.watermarks`` as every worker, the authority and ``mw
    watermarks`` read it: key, value."""
    key, value = unframe(data, 2)
    Watermarks.parse(key or None, value)


def watermark_record_unchecked(data: bytes) -> None:
    """The negative control's target: the authority's own decoder, which checks nothing
    (never given what anyone may have written)."""
    Watermarks.decode(unframe(data, 2)[1])


def schema_document(data: bytes) -> None:
    """A record of ``mw.schemas`` (key, document), then a value written with it as ``mw
    tail`` decodes any stream: with the writer schema it names."""
    key, document, body = unframe(data, 3)
    topic = SchemaTopic("127.0.0.1:9")  # (no client is made to take a record)
    topic.take(key or None, document)
    if len(key) == 8 and topic.documents:
        reg = SchemaRegistry()
        reg.add_writer(topic.documents[struct.unpack("<Q", key)[0]])
        decode_any(reg, MAGIC + key + body)


def checkpoint_entries(data: bytes) -> None:
    """What a worker reads back from its checkpoint: a timer (field, value) and a
    pending batch of productions."""
    field, value, batch = unframe(data, 3)
    decode_entry(field, value)
    decode_batch(batch)


def query_log_line(data: bytes) -> None:
    """A line of a query log as the injector takes it: parsed, bounded, and encoded as
    the record it becomes."""
    if len(data) > MAX_LINE_BYTES:
        return  # (the reader cuts it: a dead letter)
    rec = parse_line(data.decode())
    if len(rec["query"].encode()) <= MAX_KEY_BYTES:
        value = {"query": rec["query"], "lang": rec["lang"], "user": rec["user"], "source_file": "f"}
        _query_serde().encode(value)


@cache
def _query_serde() -> AvroSerde:
    return AvroSerde(registry(), "zeitgeist.Query")


def witness_metadata(data: bytes) -> None:
    """A consumer group's committed-offset metadata, as the commit witness reads it
    (with and without the pipeline secret)."""
    text = data.decode(errors="replace")
    for signer in (Signer(SECRET), Signer(None)):
        commits = witness.decode(text, signer, "t", 0)
        assert 0 <= commits < 10**18, commits  # a count of commits, or 0


_UPDATE = struct.Struct(">qqqqH")
_COUNT = struct.Struct(">qq")


def model_update(data: bytes) -> None:
    """A ``model_updates`` record and the window counts after it, as the dip detector
    applies them: period, version, trained until, the record's time, the profile, then
    (bucket, count) pairs. Whatever they say, the work is bounded (``-timeout``)."""
    if len(data) < _UPDATE.size:
        return
    period, version, trained, at, slots = _UPDATE.unpack_from(data)
    pos = _UPDATE.size
    n = min(slots, (len(data) - pos) // 8)
    profile = list(struct.unpack_from(f">{n}d", data, pos))
    pos += 8 * n
    model = QueryModel(day=60, budget=1.0)
    model.on_count(0, 1)
    model.update_profile(profile, period, version, trained, at, at)
    while pos + _COUNT.size <= len(data):
        bucket, count = _COUNT.unpack_from(data, pos)
        pos += _COUNT.size
        model.on_count(bucket // 1000 * 1000, max(0, count))
        model.evaluate_until(bucket // 1000 * 1000)


TARGETS = {
    t.name: t
    for t in (
        Target("avro_record", avro_record, (SerializationError,), "single-object Avro, generated codecs"),
        Target("watermark_record", watermark_record, (RejectedRecord,), "mw.watermarks records"),
        Target(
            "schema_document", schema_document, (RejectedRecord, SerializationError), "mw.schemas documents"
        ),
        Target("checkpoint_entries", checkpoint_entries, (CorruptStateError,), "timers and pending batches"),
        Target("query_log_line", query_log_line, (ValueError, SerializationError), "the injector's lines"),
        Target("witness_metadata", witness_metadata, (), "committed-offset metadata"),
        Target("model_update", model_update, (ValueError,), "model updates and counts (dip detector)"),
    )
}
# Only for the negative control: it must crash
CONTROL = Target("watermark_record_unchecked", watermark_record_unchecked, (RejectedRecord,), "unchecked")

assert HEADER_LEN == 10  # (MAGIC + an 8-byte fingerprint: schema_document builds one)
