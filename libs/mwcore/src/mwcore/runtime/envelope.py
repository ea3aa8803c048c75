"""The record path's first step for a chunk of consumed messages (semantics section 2,
step 1): each record's id, the injector's late mark, which ids do not verify, the
``__value_schema_id`` header of a value written in confluent-kafka's header variant
(``serde/framing.py``), and the user headers (``api/headers.py``: all but the kit's own).

A message without an id gets one derived from its position, and so does one whose id
does not verify with the pipeline secret (``api/signing.py``): it is a dead letter
``bad_id``, never deduplicated under the id it claims, and its late mark is dropped.

``read_ids`` is the reference (``ReferenceReader``); the native core's reader
(``mwcore.cores.native``), whose messages carry these headers apart, does the same work
in Rust (``libs/mwcore/tests/test_native.py`` holds the two to identical output).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mwcore.api import ids
from mwcore.api.headers import RESERVED_PREFIX, Headers
from mwcore.api.record import ID_HEADER, LATE_HEADER
from mwcore.api.signing import MAC_HEADER, Signer
from mwcore.serde.framing import SCHEMA_ID_HEADER
from mwcore.transport.message import Message

# (rids, lates, forged, schema_ids, headers): each message's record id; the index and
# mark of each late one; the indexes whose id did not verify; the index and header of each
# value whose writer schema its __value_schema_id header names; the index and user
# headers of each message that has any.
Envelope = tuple[list[bytes], dict[int, bytes], set[int], dict[int, bytes], dict[int, Headers]]


class IdReader(Protocol):
    """Reads a chunk's envelope: ``ReferenceReader``, or the native core's (which reads
    only the native consumer's messages)."""

    def read(self, messages: Sequence[Message]) -> Envelope: ...


class ReferenceReader:
    """``read_ids`` with the pipeline's signer."""

    def __init__(self, signer: Signer) -> None:
        self._signer = signer

    def read(self, messages: Sequence[Message]) -> Envelope:
        return read_ids(messages, self._signer)


def read_ids(messages: Sequence[Message], signer: Signer) -> Envelope:
    rids: list[bytes] = []
    lates: dict[int, bytes] = {}
    forged: set[int] = set()
    schema_ids: dict[int, bytes] = {}
    users: dict[int, Headers] = {}
    id_bytes = ids.ID_BYTES
    checking = signer.enabled
    for i, m in enumerate(messages):
        rid: Any = None
        mac: Any = None
        user: list[tuple[str, bytes | None]] | None = None
        for name, hval in m.headers() or ():
            if name == ID_HEADER:
                rid = hval
            elif name == LATE_HEADER:
                lates[i] = hval if isinstance(hval, bytes) else b""
            elif name == MAC_HEADER:
                mac = hval
            elif name == SCHEMA_ID_HEADER:
                schema_ids[i] = hval if isinstance(hval, bytes) else b""
            elif name[:3].lower() != RESERVED_PREFIX:
                if user is None:
                    user = []
                user.append((name, hval))
        if user is not None:
            users[i] = tuple(user)
        if rid.__class__ is not bytes or len(rid) != id_bytes:
            rid = ids.from_position(m.topic() or "", m.partition() or 0, m.offset() or 0)
        elif checking and not signer.verify_record(rid, m.topic() or "", m.key(), m.value() or b"", mac):
            forged.add(i)  # never seen under the id it claims: it could suppress the real one
            lates.pop(i, None)
            rid = ids.from_position(m.topic() or "", m.partition() or 0, m.offset() or 0)
        rids.append(rid)
    return rids, lates, forged, schema_ids, users
