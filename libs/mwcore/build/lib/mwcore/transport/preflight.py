"""Checks of the broker at a process's start: one line that says what to fix (a
``ConfigError`` naming the setting), within a bounded time."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from mwcore.errors import ConfigError
from mwcore.transport.client_properties import client_properties
from mwcore.transport.topics import admin_config


def check_kafka(bootstrap: str, setting: str = "MW_BOOTSTRAP", timeout_s: float = 10.0) -> None:
    """Ask the brokers of ``bootstrap`` for metadata, with the user's client properties
    (``client_properties.py``); a ConfigError naming what to fix if none answers
    within ``timeout_s``: the servers, the SASL credentials, or the TLS trust."""
    errors: list[KafkaError] = []
    conf = admin_config(
        bootstrap,
        log_level=0,
        error_cb=errors.append,
        **{"socket.connection.setup.timeout.ms": int(timeout_s * 1000)},
    )
    try:
        admin = AdminClient(conf)
    except KafkaException as exc:  # a property librdkafka does not know, or a bad value
        raise ConfigError(f"the Kafka client properties (MW_KAFKA_*): {_kafka_text(exc)}") from None
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0.5)  # serve the queued error callbacks: they say why
        raise ConfigError(_refusal(bootstrap, setting, timeout_s, errors, _kafka_text(exc))) from None
    if not meta.brokers:
        raise ConfigError(f"{setting}={bootstrap}: the Kafka cluster reports no brokers")


def _refusal(bootstrap: str, setting: str, timeout_s: float, errors: list[KafkaError], seen: str) -> str:
    for err in errors:
        text = err.str()
        if err.code() == KafkaError._AUTHENTICATION or "SASL authentication" in text:
            user = client_properties().get("sasl.username", "")
            who = f" for MW_KAFKA_SASL_USERNAME={user}" if user else ""
            return (
                f"{setting}={bootstrap}: the broker refused the SASL credentials{who} "
                f"(check MW_KAFKA_SASL_MECHANISM and MW_KAFKA_SASL_PASSWORD): {_clean(text)}"
            )
        if "certificate verify failed" in text or "SSL handshake failed" in text:
            return (
                f"{setting}={bootstrap}: the broker's TLS certificate is not trusted "
                f"(set MW_KAFKA_SSL_CA_LOCATION to the CA that signed it): {_clean(text)}"
            )
    return f"{setting}={bootstrap}: cannot reach a Kafka broker within {timeout_s:g}s ({seen})"


def _clean(text: str) -> str:
    """librdkafka's message without the broker name prefix it repeats."""
    return (
        text.split(": ", 1)[-1]
        if text.count(": ") >= 1 and text.startswith(("sasl_ssl://", "ssl://"))
        else text
    )


def _kafka_text(exc: KafkaException) -> str:
    err: Any = exc.args[0] if exc.args else None
    return str(err.str()) if hasattr(err, "str") else _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
