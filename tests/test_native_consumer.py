"""The native core's group consumer hands the runtime what confluent-kafka's hands it.

Messages of every shape a topic may hold (no key, no value, empty ones, no headers, a
header without a value, headers of one name repeated, more headers than fit inline,
65,537 of them with the id last, names that are not ASCII, a value of 256 KiB, signed
ids and forged ones, several topics) are written to a real Kafka, then read by both
members (``transport.consumer.GroupConsumer`` and
``mwcore.cores.native.consumer.NativeGroupConsumer``, each its own group): every message
comes out of both with the same topic, partition, offset, key, value, timestamp and
headers, and the record path's headers read in Rust (``envelope.rs``) give the ids,
late marks and verdicts the reference reads from the same messages, with and without
the pipeline secret.

Both ways of the native consumer's polls: a call a message on the consumer's queue, and
the fetched messages' own queue taken in one call (a worker's way).

A header name that is not UTF-8 (which confluent-kafka can neither write nor read) is
read by the native consumer with U+FFFD, and its record's own headers still found.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer

from mwcore.api.ids import random_id
from mwcore.api.signing import UNSIGNED, Signer
from mwcore.cores.native.consumer import NativeGroupConsumer
from mwcore.runtime.envelope import read_ids
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.consumer import GroupConsumer, Part
from mwcore.transport.topics import ensure_topics
from testbed.native import requires_native, rust
from testbed.raw_kafka import produce_with_headers

pytestmark = requires_native

BEGINNING = -2  # librdkafka's OFFSET_BEGINNING
SIGNER = Signer("the pipeline secret of the native consumer's test", "read")  # a version-1 MAC counts
SIGNED_ID = random_id()

HEADERS: list[list[tuple[str, bytes | None]] | None] = [
    None,
    [],
    [("mw-id", b"0123456789abcdef")],
    [("mw-id", b"0123456789abcdef"), ("mw-late-ms", b"1500")],
    [("mw-id", None), ("mw-late-ms", None)],
    [("mw-id", b"short")],
    [("mw-id", b"first-id-16bytes"), ("mw-id", b"second-id16bytes")],  # the last counts
    [("x-\u00e9t\u00e9", b"\xff\x00"), ("", b""), ("mw-mac", b"m" * 16)],
    [(f"h{i}", bytes([i]) * i) for i in range(9)] + [("mw-id", b"after-eight-hdrs")],
    [("mw-id", SIGNED_ID), ("mw-mac", SIGNER.sign_id(SIGNED_ID))],
    [("mw-id", SIGNED_ID), ("mw-mac", b"forged-mac-bytes")],
    [("__value_schema_id", b"\x00\x00\x00\x00\x07")],  # confluent-kafka's header variant
    [("__value_schema_id", b"\x01" + b"g" * 16), ("mw-id", b"0123456789abcdef"), ("__value_schema_id", None)],
]
# one index past what 16 bits hold: the id after 65,536 headers counts, not the first
MANY: list[tuple[str, bytes | None]] = [("mw-id", b"the-first-id-16b"), *[("", None)] * 65_536]
MANY.append(("mw-id", b"the-last-id-16bb"))
KEYS: list[bytes | None] = [None, b"", b"k", "cl\u00e9".encode(), b"\xff\xfe", b"x" * 300]
VALUES: list[bytes | None] = [None, b"", b"v", b"\x00" * 17, b"w" * (256 * 1024)]


def _write(bootstrap: str, topics: list[str]) -> int:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    n = 0
    for i, headers in enumerate(HEADERS):
        for j, key in enumerate(KEYS):
            for k, value in enumerate(VALUES):
                topic = topics[(i + j + k) % len(topics)]
                kwargs: dict[str, Any] = {"key": key, "value": value, "timestamp": 1_700_000_000_000 + n}
                if headers is not None:
                    kwargs["headers"] = headers
                p.produce(topic, partition=n % 2, **kwargs)
                n += 1
    p.produce(topics[0], key=b"many", value=b"v", headers=MANY, timestamp=1_700_000_000_000 + n)
    n += 1
    assert p.flush(30) == 0
    return n


def _read(member: GroupConsumer | NativeGroupConsumer, topics: list[str], n: int) -> list[Any]:
    member.subscribe(topics, lambda parts: dict.fromkeys(parts, BEGINNING), lambda _: None, lambda _: None)
    got: list[Any] = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        got.extend(member.poll(500, 0.5))
    member.close()
    assert len(got) == n, f"read {len(got)} of {n}"
    return sorted(got, key=lambda m: (m.topic(), m.partition(), m.offset()))


def _fields(m: Any) -> tuple[Any, ...]:
    headers = m.headers()
    return (
        m.topic(),
        m.partition(),
        m.offset(),
        m.key(),
        m.value(),
        m.timestamp(),
        None if headers is None else [tuple(h) for h in headers],
        m.error(),
    )


@pytest.mark.parametrize("batch_poll", [False, True], ids=["per-message", "batch"])
def test_both_consumers_read_every_message_alike(stack: LocalStack, namespace: str, batch_poll: bool) -> None:
    topics = [f"{namespace}.a", f"{namespace}.b-2", f"{namespace}.c_3"]
    ensure_topics(stack.bootstrap, dict.fromkeys(topics, 2))
    n = _write(stack.bootstrap, topics)

    reference = _read(GroupConsumer(stack.bootstrap, f"{namespace}-ref"), topics, n)
    member = NativeGroupConsumer(stack.bootstrap, f"{namespace}-native", batch_poll=batch_poll)
    ours = _read(member, topics, n)

    assert [_fields(m) for m in ours] == [_fields(m) for m in reference]
    # what envelope.rs reads of the headers kept apart is what the reference reads of all
    assert rust.read_ids(ours) == read_ids(reference, UNSIGNED)
    signed = rust.read_ids(ours, SIGNER.mac_key, SIGNER.accepts_v1)
    assert signed == read_ids(reference, SIGNER)
    rids, _, forged, schema_ids, _ = signed
    assert rids.count(SIGNED_ID) == len(KEYS) * len(VALUES)  # the signed ones verify
    assert len(forged) >= len(KEYS) * len(VALUES)  # the forged MACs, and unsigned ids
    assert len(schema_ids) == 2 * len(KEYS) * len(VALUES)  # the header variant's, the last counting
    assert b"the-last-id-16bb" in read_ids(reference, UNSIGNED)[0]
    assert {type(m).__name__ for m in ours} == {"Msg"}
    assert Part(topics[0], 0) in {Part(m.topic(), m.partition()) for m in ours}


@pytest.mark.parametrize("batch_poll", [False, True], ids=["per-message", "batch"])
def test_a_header_name_that_is_not_utf8_is_read_and_its_record_s_headers_found(
    stack: LocalStack, namespace: str, batch_poll: bool
) -> None:
    topic = f"{namespace}.raw"
    ensure_topics(stack.bootstrap, {topic: 1})
    rid = random_id()
    produce_with_headers(stack.bootstrap, topic, b"k", b"v", [(b"\xff\xfe-name", b"x"), (b"mw-id", rid)])

    member = NativeGroupConsumer(stack.bootstrap, f"{namespace}-native", batch_poll=batch_poll)
    (ours,) = _read(member, [topic], 1)

    assert ours.headers() == [("\ufffd\ufffd-name", b"x"), ("mw-id", rid)]
    assert rust.read_ids([ours])[0] == [rid]
    assert rust.read_ids([ours])[4] == {0: (("\ufffd\ufffd-name", b"x"),)}  # the user's
    assert (ours.key(), ours.value()) == (b"k", b"v")
    # confluent-kafka's consumer cannot read them: its headers() raises SystemError, or
    # (after a good header) hands over a list whose tuple holds NULL. Not asked here.


@pytest.mark.parametrize("native_member", [False, True], ids=["confluent", "native"])
def test_a_closing_member_takes_no_new_partitions(
    stack: LocalStack, namespace: str, native_member: bool
) -> None:
    """A rebalance's assignment that waits in a member's queue when it closes is not
    taken: ``on_assign`` (which acquires intervals) never runs once ``close`` began."""
    member_type = NativeGroupConsumer if native_member else GroupConsumer
    topic = f"{namespace}.t"
    ensure_topics(stack.bootstrap, {topic: 4})
    group = f"{namespace}-g"
    calls: list[tuple[str, bool]] = []
    closing = False

    def assigned(parts: list[Part]) -> dict[Part, int]:
        calls.append(("assign", closing))
        return dict.fromkeys(parts, BEGINNING)

    def revoked(parts: list[Part]) -> None:
        calls.append(("revoke", closing))

    a = member_type(stack.bootstrap, group, session_timeout_ms=6000)
    a.subscribe([topic], assigned, revoked, revoked)
    deadline = time.monotonic() + 30
    while not a.assignment() and time.monotonic() < deadline:
        a.poll(10, 0.2)
    assert a.assignment()
    b = GroupConsumer(stack.bootstrap, group, session_timeout_ms=6000)
    b.subscribe([topic], lambda parts: dict.fromkeys(parts, BEGINNING), lambda _: None, lambda _: None)
    try:
        # a serves the revocation, then stops polling while the group settles: the new
        # assignment waits in its queue
        seen = len(calls)
        deadline = time.monotonic() + 30
        while len(calls) == seen and time.monotonic() < deadline:
            b.poll(10, 0.05)
            a.poll(10, 0)  # no wait: the revocation alone, not what follows it
        assert calls[-1] == ("revoke", False), calls
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            b.poll(10, 0.1)
        closing = True
        a.close()
        assert ("assign", True) not in calls, calls
    finally:
        b.close()


def _drain(member: NativeGroupConsumer, b: GroupConsumer | None = None, quiet_s: float = 2.0) -> list[Any]:
    """What ``member`` reads until it has read nothing for ``quiet_s`` (``b`` polled too)."""
    got: list[Any] = []
    last = time.monotonic()
    while time.monotonic() - last < quiet_s:
        if b is not None:
            b.poll(10, 0)
        batch = member.poll(500, 0.1)
        if batch:
            got.extend(batch)
            last = time.monotonic()
    return got


def _offsets(messages: list[Any]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for m in messages:
        assert m.error() is None
        out.setdefault(m.partition(), []).append(m.offset())
    return out


def test_batch_polls_read_on_in_order_across_a_seek_and_a_new_assignment(
    stack: LocalStack, namespace: str
) -> None:
    """The fetched messages' own queue (``fetched.rs``) keeps each partition's order and
    follows the group: after a seek a partition is read again from there, and after a
    rebalance from where ``on_assign`` says, only the partitions the member holds."""
    topic = f"{namespace}.t"
    ensure_topics(stack.bootstrap, {topic: 2})
    p = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5})
    for i in range(400):
        p.produce(topic, partition=i % 2, key=b"k", value=str(i).encode())
    assert p.flush(30) == 0
    group = f"{namespace}-g"
    starts = {"at": BEGINNING}
    a = NativeGroupConsumer(stack.bootstrap, group, session_timeout_ms=6000, batch_poll=True)
    a.subscribe([topic], lambda parts: dict.fromkeys(parts, starts["at"]), lambda _: None, lambda _: None)

    assert _offsets(_drain(a)) == {0: list(range(200)), 1: list(range(200))}

    a.seek(Part(topic, 0), 150)
    assert _offsets(_drain(a)) == {0: list(range(150, 200))}

    starts["at"] = 10
    b = GroupConsumer(stack.bootstrap, group, session_timeout_ms=6000)
    b.subscribe([topic], lambda parts: dict.fromkeys(parts, 0), lambda _: None, lambda _: None)
    try:
        read = _offsets(_drain(a, b, quiet_s=8.0))
        held = [part.partition for part in a.assignment()]
        assert len(held) == 1 and read == {held[0]: list(range(10, 200))}, (held, read)
    finally:
        b.close()
        a.close()
