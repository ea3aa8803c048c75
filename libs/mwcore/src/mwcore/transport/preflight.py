"""Checks of the broker at a process's start: one line that says what to fix (a
``ConfigError`` naming the setting), within a bounded time."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from mwcore.errors import ConfigError


def check_kafka(bootstrap: str, setting: str = "MW_BOOTSTRAP", timeout_s: float = 10.0) -> None:
    """Ask the brokers of ``bootstrap`` for metadata; a ConfigError naming ``setting``
    if none answers within ``timeout_s``."""
    conf: dict[str, str | int | float] = {
        "bootstrap.servers": bootstrap,
        "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
    }
    admin = AdminClient({**conf, "log_level": 0})
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        err: Any = exc.args[0] if exc.args else None
        seen = err.str() if hasattr(err, "str") else _first_line(exc)
        raise ConfigError(
            f"{setting}={bootstrap}: cannot reach a Kafka broker within {timeout_s:g}s ({seen})"
        ) from None
    if not meta.brokers:
        raise ConfigError(f"{setting}={bootstrap}: the Kafka cluster reports no brokers")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
