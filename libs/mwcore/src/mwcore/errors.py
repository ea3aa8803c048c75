"""The exception tree of mwcore: every error the kit raises derives from MwError."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# a query parameter whose name holds one of these is a secret (?password=, ?ssl_password=,
# ?sentinel_password=, ?token=, ?access_key=, ...)
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "auth", "key", "credential")


class MwError(Exception):
    """Base of every error raised by mwcore."""


class ConfigError(MwError):
    """The configuration is invalid; the message says what to fix."""


class RefusedError(MwError):
    """An operator's command was refused as unsafe or pointless now; the message says
    why and what to do (``mw retire`` while the computation's workers still run)."""


class RejectedRecord(MwError):
    """A control record (a watermark, a schema document, a witness) that cannot be used:
    malformed, out of range or not authentic. Its reader skips it and counts it
    (``transport/rejections.py``); ``reason`` is a short label for the metric."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class FencedError(MwError):
    """A write carried a sequencer token that is no longer the interval's current one.

    The holder has lost the key interval to a successor (or Redis restarted and every
    token it granted before is void). It must drop the interval's soft state.
    """

    def __init__(self, interval: str, token: str, reason: str = "token") -> None:
        super().__init__(f"interval {interval}: token {token} is no longer current ({reason})")
        self.interval = interval
        self.token = token
        self.reason = reason  # "token": another grant exists; "restarted": Redis restarted

    @property
    def store_restarted(self) -> bool:
        return self.reason == "restarted"


class StoreRollbackError(MwError):
    """The store holds fewer checkpoints of an interval than Kafka witnessed (witness.py):
    it lost committed checkpoints. The worker stops rather than produce from it."""

    def __init__(self, interval: str, store_commits: int, witnessed_commits: int) -> None:
        super().__init__(
            f"interval {interval}: the store has {store_commits} checkpoints but Kafka witnessed "
            f"{witnessed_commits}: it lost {witnessed_commits - store_commits} committed checkpoints "
            "(restored from an older copy, or run without appendfsync always). Stopped before "
            "producing from it; see docs/reliability.md, 'A store that lost checkpoints'"
        )
        self.interval = interval
        self.store_commits = store_commits
        self.witnessed_commits = witnessed_commits


class CheckpointError(MwError):
    """A checkpoint was refused for a reason other than fencing (malformed arguments)."""


class CorruptStateError(MwError):
    """What the store holds cannot be read back: written by something other than the
    kit, or damaged (the process stops; the record of no topic is at fault)."""


class SerializationError(MwError):
    """A value could not be encoded or decoded (the record goes to the dead-letter topic)."""


class InvalidRecord(SerializationError):
    """An input record outside the kit's bounds (``limits.py``) or whose id does not
    verify (``api/signing.py``): a dead letter, with ``reason`` in its ``mw-reason``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class UnknownSchemaError(SerializationError):
    """The writer schema of a message is not in the schema registry."""


class SchemaConflictError(UnknownSchemaError):
    """Two different documents were published under one writer fingerprint: one of them
    is forged, and no choice between them is safe. Its records are dead letters."""


class SchemaLookupError(MwError):
    """The schemas topic could not be read. Not the record's fault: the worker stops
    (and its supervisor restarts it) rather than dead-letter a record it could read."""


class InternalError(MwError):
    """A bug of the kit's: a panic in the native core's per-record code
    (``native/src/errors.rs``). The record it met is dead-lettered (``internal_error``)
    and logged as an error; the worker goes on."""


def shown_url(url: str) -> str:
    """``url`` fit for a message: a password in it (``user:password@``) and every query
    parameter whose name says it is a secret (``?password=``, ``?ssl_password=``,
    ``?token=``, ...) are ``***``; several URLs, comma-separated, each so."""
    if "," in url:
        return ",".join(shown_url(part) for part in url.split(","))
    try:
        parts = urlsplit(url)
        password = parts.password
        port = parts.port
    except ValueError:  # not a URL one can take apart: show none of it
        return "<an invalid URL>"
    if password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        netloc = f"{user}:***@{host}" + (f":{port}" if port else "")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        query = [
            (k, "***" if any(w in k.lower() for w in _SECRET_WORDS) else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
        parts = parts._replace(query=urlencode(query, safe="*"))
    return urlunsplit(parts)
