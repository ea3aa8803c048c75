"""Record ids and control records authenticated with a pipeline secret (``MW_ID_SECRET``).

Record ids are predictable (derived from what caused a record, from a file's name and
line, from a position), and dedup trusts them: a record that arrives first under a
real record's id would suppress it. With a secret set, every producer of the kit adds
a keyed MAC of the id (``mw-mac`` header) and every reader checks it; a record whose id
does not verify is a dead letter (``bad_id``), deduplicated under its position, never
under the id it claims. The watermark authority signs its records the same way, and
the commit witness its offset metadata, so with a secret neither can be forged into
effect by whoever can write the topic.

The MAC is keyed BLAKE2b (a MAC by construction), 16 bytes, over a context label and
the bytes it covers. Without a secret nothing is signed and nothing checked.

A record's MAC comes in two versions (``mw-mac``):

- **Version 2** (17 bytes: ``02`` and the MAC) binds the id to the topic the record is
  on and to a digest of its key and its Avro body (the value less its framing's
  prefix, ``serde/framing.py``): a genuine id and MAC copied onto other content, or
  onto another topic, do not verify.
- **Version 1** (16 bytes) covers the id only. Records written before version 2 carry
  it; ``MW_MAC_V1`` says what is done with it: ``off`` (refused, the default),
  ``read`` (accepted, during a migration window) or ``write`` (accepted, and written:
  the first step of a rolling upgrade, while readers that know only version 1 still
  run, and the way back).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import TYPE_CHECKING, Literal

from mwcore.serde.framing import frame_of

if TYPE_CHECKING:
    from mwcore.api.record import Production

MAC_HEADER = "mw-mac"
MAC_BYTES = 16
MAC_V2 = 2
MIN_SECRET_CHARS = 16
MacV1 = Literal["off", "read", "write"]
_NO_KEY = 0xFFFFFFFF  # the length written for a record without a key


def record_digest(topic: str, key: bytes | None, value: bytes) -> bytes:
    """What a version-2 MAC covers besides the id: the topic, and a digest of the key and
    the Avro body (framing left out)."""
    frame = frame_of(value)
    body = memoryview(value)[frame.body :] if frame is not None else value
    name = topic.encode()
    digest = hashlib.blake2b(digest_size=32, person=b"mw-content")
    digest.update(struct.pack(">I", _NO_KEY if key is None else len(key)))
    if key is not None:
        digest.update(key)
    digest.update(body)
    return struct.pack(">H", len(name)) + name + digest.digest()


class Signer:
    """Signs and checks with the pipeline secret (``None``: nothing is signed)."""

    __slots__ = ("_key", "mac_v1")

    def __init__(self, secret: str | None = None, mac_v1: MacV1 = "off") -> None:
        if secret is not None and len(secret) < MIN_SECRET_CHARS:
            raise ValueError(f"a pipeline secret needs at least {MIN_SECRET_CHARS} characters")
        self.mac_v1 = mac_v1
        self._key = (
            None
            if secret is None
            else hashlib.blake2b(secret.encode(), digest_size=32, person=b"mw-secret").digest()
        )

    @property
    def enabled(self) -> bool:
        return self._key is not None

    @property
    def mac_key(self) -> bytes | None:
        """The key the MACs are made with (the native core makes them too)."""
        return self._key

    def mac(self, context: bytes, data: bytes) -> bytes:
        """The MAC of ``data`` in ``context`` (a short label: what the bytes are)."""
        assert self._key is not None, "no pipeline secret"
        return hashlib.blake2b(data, digest_size=MAC_BYTES, key=self._key, person=context).digest()

    def verify(self, context: bytes, data: bytes, mac: bytes | None) -> bool:
        """True if there is no secret, or ``mac`` is ``data``'s MAC in ``context``."""
        if self._key is None:
            return True
        return mac is not None and hmac.compare_digest(self.mac(context, data), mac)

    def sign_id(self, record_id: bytes) -> bytes:
        return self.mac(b"mw-id", record_id)

    def verify_id(self, record_id: bytes, mac: bytes | None) -> bool:
        return self.verify(b"mw-id", record_id, mac)

    @property
    def accepts_v1(self) -> bool:
        return self.mac_v1 != "off"

    def sign_record(self, record_id: bytes, topic: str, key: bytes | None, value: bytes) -> bytes:
        """A record's MAC: version 2 (version 1 where ``mac_v1`` is ``write``)."""
        if self.mac_v1 == "write":
            return self.sign_id(record_id)
        return bytes([MAC_V2]) + self.mac(b"mw-rec2", record_id + record_digest(topic, key, value))

    def sign_production(self, p: Production) -> bytes:
        """``sign_record`` of a production (what the runtime sends)."""
        return self.sign_record(p.id, p.topic, p.key, p.value or b"")

    def verify_record(
        self, record_id: bytes, topic: str, key: bytes | None, value: bytes, mac: bytes | None
    ) -> bool:
        """True if there is no secret, or ``mac`` is the record's version-2 MAC (or its
        version-1 MAC, where that is accepted)."""
        if self._key is None:
            return True
        if mac is None:
            return False
        if len(mac) == MAC_BYTES + 1 and mac[0] == MAC_V2:
            want = self.mac(b"mw-rec2", record_id + record_digest(topic, key, value))
            return hmac.compare_digest(want, mac[1:])
        return len(mac) == MAC_BYTES and self.accepts_v1 and self.verify_id(record_id, mac)


UNSIGNED = Signer()
