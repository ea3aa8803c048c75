"""The bounds on what a record (or a file, or a control record) can make the kit do.

Anyone who can write a topic the kit reads, or a file in an injector's directory, may
write anything; these bounds keep every loop, allocation and format a record reaches
finite (semantics I-12). What exceeds one is a dead letter (input topics, an injector's
files) or a rejected record (control topics), never a crash. docs/security.md lists
them with what each protects.
"""

from __future__ import annotations

# A record's key, as UTF-8 bytes: state fields, timer entries and dead letters carry it.
MAX_KEY_BYTES = 32_768
# A record's user headers (``api/headers.py``), in and out: how many, and their names
# and values together (with a key and a value at their bounds, a production stays under
# Kafka's default message.max.bytes).
MAX_HEADERS = 64
MAX_HEADER_BYTES = 65_536
# Record timestamps (ms since the epoch): Kafka's "no timestamp" (-1) and anything
# past 9999-12-31 are refused; timers and watermarks add to them without overflowing.
MIN_TIMESTAMP = 0
MAX_TIMESTAMP = 253_402_300_799_999
# Items one Avro decode may produce from arrays and maps whose items take no bytes
# (array<null>): a 30-byte record can claim 2**62 of them.
MAX_AVRO_ITEMS = 1_000_000
# A schema document on the schemas topic (the largest of the repository's is 2 KiB).
MAX_SCHEMA_BYTES = 262_144
# A namespace names topics (``<ns>.<stream>``), consumer groups and Redis keys, inside
# Redis Cluster hash tags (``{<ns>/...}``): letters, digits, ``_`` and ``-`` only.
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,62}$"
# What a dead letter carries of its input (key and value together); the rest is cut
# (``mw-truncated`` says the original size), so a dead letter is never too large to send.
MAX_DEAD_LETTER_BYTES = 524_288
