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
"""

from __future__ import annotations

import hashlib
import hmac

MAC_HEADER = "mw-mac"
MAC_BYTES = 16
MIN_SECRET_CHARS = 16


class Signer:
    """Signs and checks with the pipeline secret (``None``: nothing is signed)."""

    __slots__ = ("_key",)

    def __init__(self, secret: str | None = None) -> None:
        if secret is not None and len(secret) < MIN_SECRET_CHARS:
            raise ValueError(f"a pipeline secret needs at least {MIN_SECRET_CHARS} characters")
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


UNSIGNED = Signer()
