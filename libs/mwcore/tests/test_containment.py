"""What a hostile record meets before it can make the kit work (pure logic; the system
tests in tests/test_hostile.py send them through real Kafka and Redis)."""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import fastavro
import pytest

from mwcore.api.record import Production
from mwcore.api.signing import Signer
from mwcore.errors import ConfigError, InvalidRecord, RejectedRecord, SchemaConflictError
from mwcore.limits import MAX_AVRO_ITEMS, MAX_DEAD_LETTER_BYTES
from mwcore.runtime import dead_letters
from mwcore.runtime.dead_letters import Incoming
from mwcore.runtime.witness import decode, encode
from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.codegen import compile_codec
from mwcore.serde.wire import _write_long
from mwcore.transport.rejections import REJECTED
from mwcore.transport.schema_topic import SchemaTopic
from mwcore.watermarks.published import Watermarks

SECRET = "a pipeline secret of some length"


def _wm(**fields: Any) -> bytes:
    base = {
        "name": "windower",
        "kind": "computation",
        "input": 5,
        "output": 4,
        "input_pct": 6,
        "output_pct": 4,
    }
    return json.dumps({**base, **fields}).encode()


def test_a_watermark_record_written_by_the_authority_is_accepted() -> None:
    wm = Watermarks("windower", "computation", 5, 4, 6, 4, 7)
    assert Watermarks.parse(b"windower", wm.encode()) == wm
    injector = Watermarks("src", "injector", 9, 9, 9, 9)
    assert Watermarks.parse(b"src", injector.encode()) == injector


@pytest.mark.parametrize(
    ("key", "raw", "reason"),
    [
        (b"windower", b"not json", "not_json"),
        (b"windower", b"[" * 100_000 + b"]" * 100_000, "too_large"),
        (b"windower", b"[" * 2000 + b"]" * 2000, "not_json"),  # nested past the recursion limit
        (b"windower", b"[1, 2]", "not_an_object"),
        (b"windower", json.dumps({"kind": "computation"}).encode(), "bad_name"),
        (b"windower", _wm(name="win}dower"), "bad_name"),
        (
            b"x",
            _wm(input=2**63 - 1, output=2**63 - 1, input_pct=2**63 - 1, output_pct=2**63 - 1),
            "key_mismatch",
        ),
        (None, _wm(), "key_mismatch"),
        (b"windower", _wm(kind="wizard"), "bad_kind"),
        (b"windower", _wm(input="9"), "out_of_range"),
        (b"windower", _wm(input=True), "out_of_range"),
        (b"windower", _wm(input=2**63), "out_of_range"),
        (b"windower", _wm(output=7), "inconsistent"),  # a computation's output past its input
        (b"windower", _wm(input_pct=1), "inconsistent"),
    ],
)
def test_a_watermark_record_that_is_not_one_is_rejected(key: bytes | None, raw: bytes, reason: str) -> None:
    with pytest.raises(RejectedRecord) as why:
        Watermarks.parse(key, raw)
    assert why.value.reason == reason


def test_a_signer_verifies_only_its_own_macs() -> None:
    signer, other = Signer(SECRET), Signer(SECRET + "!")
    rid = b"r" * 16
    assert signer.verify_id(rid, signer.sign_id(rid))
    assert not signer.verify_id(rid, other.sign_id(rid))
    assert not signer.verify_id(b"s" * 16, signer.sign_id(rid))
    assert not signer.verify_id(rid, None)
    assert Signer().verify_id(rid, None)  # no secret: nothing is checked
    with pytest.raises(ValueError, match="at least 16"):
        Signer("short")


def test_a_witness_with_a_secret_counts_only_when_it_verifies() -> None:
    signer = Signer(SECRET)
    meta = encode(42, signer, "in", 3)
    assert decode(meta, signer, "in", 3) == 42
    before = REJECTED.counts[("in", "bad_mac")]
    assert decode("mw:999999999", signer, "in", 3) == 0  # a forged count stops nothing
    assert decode(meta, signer, "in", 4) == 0  # another interval's
    assert REJECTED.counts[("in", "bad_mac")] == before + 2
    assert decode("mw:7") == 7 and decode("junk") == 0 and decode("mw:" + "9" * 500) == 0


def _zigzag(v: int) -> bytes:
    out = bytearray()
    _write_long(out, v)  # Avro's zig-zag varint, as the codecs write it
    return bytes(out)


def test_an_array_of_items_that_take_no_bytes_is_bounded_by_a_count() -> None:
    """A generated decoder reading ``array<null>``: a 10-byte record claiming 2**62 items
    is refused at once; items that take bytes are bounded by the data."""
    schema = fastavro.parse_schema(
        {"type": "record", "name": "X", "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}]}
    )
    codec = compile_codec(schema, b"")
    assert codec is not None
    began = time.monotonic()
    with pytest.raises(ValueError, match="more items"):
        codec.decode(_zigzag(2**62) + b"\x00", 0)
    with pytest.raises(ValueError, match="more items"):
        codec.decode(_zigzag(MAX_AVRO_ITEMS) + _zigzag(1) + b"\x00", 0)
    assert time.monotonic() - began < 1
    assert codec.decode(_zigzag(3) + b"\x00", 0) == {"a": [None, None, None]}


def test_a_schema_whose_arrays_hold_nothing_is_refused() -> None:
    """From a directory or the schemas topic: its records could claim any number of
    items, and fastavro (the resolving reader) would loop over them."""
    doc = {
        "type": "record",
        "name": "mw.tests.Nothing",
        "fields": [
            {"name": "a", "type": {"type": "array", "items": {"type": "record", "name": "E", "fields": []}}}
        ],
    }
    with pytest.raises(ConfigError, match="takes no bytes per item"):
        SchemaRegistry().add(doc)
    with pytest.raises(ConfigError, match="takes no bytes per item"):
        SchemaRegistry().add_writer(doc)


READING = {
    "type": "record",
    "name": "mw.tests.R",
    "fields": [{"name": "lang", "type": "string"}, {"name": "query", "type": "string"}],
}


def _fp(doc: Any) -> int:
    return SchemaRegistry().add_writer(doc).fingerprint


def test_the_schemas_topic_takes_only_documents_that_match_their_key() -> None:
    topic = SchemaTopic("127.0.0.1:9")  # nothing connects: _read is the check alone
    fp = _fp(READING)
    key = struct.pack("<Q", fp)
    topic.take(key, json.dumps(READING).encode())
    assert topic.documents[fp] == READING
    swapped = {**READING, "fields": READING["fields"][::-1]}  # another document under a real key
    cases = [
        (key, json.dumps(swapped).encode(), "not_its_schema"),
        (key, b"[" * 5000 + b"]" * 5000, "not_json"),
        (key, b"{" * 300_000, "too_large"),
        (b"short", json.dumps(READING).encode(), "bad_key"),
        (struct.pack("<Q", 7), json.dumps({"type": "array", "items": "long"}).encode(), "not_its_schema"),
        (struct.pack("<Q", 7), json.dumps({"type": "nonsense"}).encode(), "not_its_schema"),
    ]
    for k, value, reason in cases:
        with pytest.raises(RejectedRecord) as why:
            topic.take(k, value)
        assert why.value.reason == reason
    assert topic.documents == {fp: READING}


def test_two_documents_under_one_fingerprint_are_a_conflict() -> None:
    """The same fields with another default (defaults are not part of the fingerprint):
    neither is chosen; the fingerprint's records are dead letters naming the conflict."""
    topic = SchemaTopic("127.0.0.1:9")
    with_default = {**READING, "fields": [{**READING["fields"][0], "default": "en"}, READING["fields"][1]]}
    fp = _fp(READING)
    assert _fp(with_default) == fp
    key = struct.pack("<Q", fp)
    topic.take(key, json.dumps(READING).encode())
    with pytest.raises(RejectedRecord, match="conflict"):
        topic.take(key, json.dumps(with_default).encode())
    with pytest.raises(SchemaConflictError, match="two different documents"):
        topic.lookup(fp)


def _incoming(key: bytes | None, value: bytes, ts: int = 5) -> Incoming:
    return Incoming("in", 0, 7, key, value, ts, b"i" * 16, None)


def test_a_dead_letter_is_always_one_the_broker_takes() -> None:
    big = dead_letters.dead_letter(
        "dlq", _incoming(b"k" * 100_000, b"v" * 2_000_000), InvalidRecord("key_too_long", "x")
    )
    assert len(big.key or b"") + len(big.value) <= MAX_DEAD_LETTER_BYTES
    headers = dict(big.headers)
    assert headers["mw-reason"] == b"key_too_long" and b"value 2000000" in headers["mw-truncated"]
    future = dead_letters.dead_letter("dlq", _incoming(b"k", b"v", ts=2**62), ValueError("x"), now_ms=1000)
    assert future.timestamp == 1000 and dict(future.headers)["mw-source-timestamp"] == str(2**62).encode()
    assert dict(future.headers)["mw-reason"] == b"user_code"


def test_a_dead_letter_keeps_the_header_that_named_its_writer_schema() -> None:
    """A value in confluent-kafka's header variant is its body alone: its dead letter
    keeps the ``__value_schema_id`` header beside it, so the bytes stay readable."""
    named = b"\x01" + b"g" * 16
    headed = _incoming(b"k", b"body")._replace(schema_id=named)
    letter = dead_letters.dead_letter("dlq", headed, ValueError("x"))
    assert letter.value == b"body" and dict(letter.headers)["__value_schema_id"] == named
    plain = dead_letters.dead_letter("dlq", _incoming(b"k", b"body"), ValueError("x"))
    assert "__value_schema_id" not in dict(plain.headers)


def test_a_production_the_broker_refuses_for_good_becomes_a_small_dead_letter() -> None:
    p = Production(b"p" * 16, "out", b"k", b"v" * 5_000_000, 2**62)
    dead = dead_letters.refused("dlq", p, "too_large", "Broker: Message size too large", 1000)
    assert dead.value == b"" and dead.timestamp == 1000 and dead.topic == "dlq"
    assert dict(dead.headers)["mw-reason"] == b"refused_too_large"
    assert (
        dead.id == dead_letters.refused("dlq", p, "too_large", "again", 2000).id
    )  # the same after a takeover


class _Reported:
    """A delivery report as confluent-kafka gives it: topic, key and value, no headers."""

    def __init__(self, p: Production, offset: int = 0) -> None:
        self.p, self._offset = p, offset

    def topic(self) -> str:
        return self.p.topic

    def key(self) -> bytes | None:
        return self.p.key

    def value(self) -> bytes:
        return self.p.value

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def headers(self) -> None:
        return None


def test_a_whole_request_refused_for_one_record_costs_only_that_record() -> None:
    """The broker refuses the whole request for the middle production's timestamp (each
    of the three reports says INVALID_TIMESTAMP): each is sent alone, only the one the
    broker refuses alone becomes a dead letter, and the batch goes again whole."""
    from confluent_kafka import KafkaError

    from mwcore.runtime.outbox import Outbox, OutboxBatch

    now = int(time.time() * 1000)
    productions = [
        Production(bytes([i]) * 16, "out", b"k", b"v%d" % i, ts)
        for i, ts in enumerate((1, now + 7_200_000, 3))
    ]
    outbox = Outbox(refuse=lambda p, why, err: dead_letters.refused("dlq", p, why, err, now))
    batch = OutboxBatch(outbox, b"b", list(productions), checkpointed=True)
    outbox.pending[b"b"] = batch
    for p in productions:
        batch(KafkaError(KafkaError.INVALID_TIMESTAMP), _Reported(p))
    assert outbox.to_send == [] and outbox.take_to_isolate() == [batch]
    alone: list[Production] = []

    def send_alone(p: Production) -> Any:
        alone.append(p)
        return KafkaError(KafkaError.INVALID_TIMESTAMP) if p.timestamp > now else None

    outbox.isolate(batch, send_alone)
    assert alone == productions
    assert batch.productions[0] == productions[0] and batch.productions[2] == productions[2]
    dead = batch.productions[1]
    assert dead.topic == "dlq" and dict(dead.headers)["mw-reason"] == b"refused_bad_timestamp"
    assert outbox.take_to_send() == [batch] and batch.remaining == 3
    for i, p in enumerate(batch.productions):  # sent again whole: all written
        batch(None, _Reported(p, i))
    assert outbox.acked == [batch] and not outbox.pending
