"""``mw tail STREAM``: a stream's records, decoded, one JSON object per line.

Like ``tail -f``: the last few records of every partition, then new ones as they come
(``--from-beginning`` for all of them, ``--no-follow`` to stop at the end of the data
as it was when the command started). Avro values are decoded with the writer schema
named in each message; values that are not Avro (dead letters, the watermark topic)
are shown as JSON when they are JSON and as escaped text otherwise. Headers other than
the record id are shown decoded, so a dead letter shows its source and its error.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

from mwcore.api.record import ID_HEADER
from mwcore.errors import ConfigError, SerializationError
from mwcore.serde.avro import SchemaRegistry, decode_any
from mwcore.serde.framing import SCHEMA_ID_HEADER, frame_of, with_schema_id_header
from mwcore.transport.message import Message
from mwcore.transport.reader import PartitionReader
from mwcore.transport.topics import end_offsets, topic_name, topic_partitions


def _text(raw: bytes | str | None) -> Any:
    if raw is None or isinstance(raw, str):
        return raw
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(raw).decode()


def render(msg: Message, stream: str, registry: SchemaRegistry) -> dict[str, Any]:
    """One message as a JSON-ready dict."""
    data = msg.value() or b""
    named = [v for n, v in msg.headers() or () if n == SCHEMA_ID_HEADER]  # the header variant
    try:
        framed = with_schema_id_header(named[-1] or b"", data) if named else data
        schema, value = decode_any(registry, framed)
    except SerializationError as exc:
        schema = None
        try:
            value = json.loads(data)
        except ValueError:
            value = _text(data)
        if named or frame_of(data) is not None:  # framed Avro (single-object or Confluent), undecodable here
            value = {"undecodable": str(exc), "bytes": _text(data)}
    headers = dict(msg.headers() or [])
    rid = headers.pop(ID_HEADER, None)
    ts_type, ts = msg.timestamp()
    out: dict[str, Any] = {
        "stream": stream,
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": ts if ts_type else None,
        "key": _text(msg.key()),
        "id": rid.hex() if isinstance(rid, bytes) else rid,
        "schema": schema,
        "value": value,
    }
    if headers:
        out["headers"] = {k: _text(v) for k, v in headers.items()}
    return out


def partitions(bootstrap: str, topic: str, stream: str) -> int:
    found = topic_partitions(bootstrap)
    if topic not in found:
        raise ConfigError(
            f"no stream {stream!r} (topic {topic!r}); topics: {', '.join(sorted(found)) or 'none'}"
        )
    return found[topic]


def tail(
    bootstrap: str,
    stream: str,
    registry: SchemaRegistry,
    *,
    namespace: str = "default",
    last: int = 10,
    from_beginning: bool = False,
    follow: bool = True,
    limit: int | None = None,
    out: TextIO = sys.stdout,
    should_stop: Callable[[], bool] = lambda: False,
) -> int:
    """Print records; the number printed."""
    topic = topic_name(namespace, stream)
    n = partitions(bootstrap, topic, stream)
    ends = end_offsets(bootstrap, {topic: n})
    starts = {p: 0 if from_beginning else max(0, ends[(topic, p)] - last) for p in range(n)}
    remaining = {p for p in range(n) if ends[(topic, p)] > starts[p]}
    reader = PartitionReader(bootstrap, {(topic, p): off for p, off in starts.items()})
    printed = 0
    try:
        while not should_stop() and (follow or remaining):
            for m in reader.poll(1000, 0.2):
                p, off = m.partition() or 0, m.offset() or 0
                if not follow and off >= ends[(topic, p)]:
                    remaining.discard(p)
                    continue
                out.write(json.dumps(render(m, stream, registry), default=str) + "\n")
                printed += 1
                if off + 1 >= ends[(topic, p)]:
                    remaining.discard(p)
                if limit is not None and printed >= limit:
                    return printed
            out.flush()
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
    return printed
