"""Kafka client properties from MW_KAFKA_* variables and MW_KAFKA_CONFIG."""

from __future__ import annotations

from pathlib import Path

import pytest

from mwcore.errors import ConfigError
from mwcore.transport.client_properties import client_properties, redacted
from mwcore.transport.topics import admin_config, consumer_config, producer_config


def test_variables_name_properties_with_underscores_for_dots() -> None:
    env = {
        "MW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MW_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
        "mw_kafka_sasl_username": "alice",
        "MW_KAFKA_HOME": "/opt/kafka",  # not a property: where mw up keeps its broker
        "MW_BOOTSTRAP": "x:1",
    }
    assert client_properties(env) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
    }


def test_a_file_is_read_first_and_a_variable_overrides_it(tmp_path: Path) -> None:
    f = tmp_path / "client.properties"
    f.write_text("# TLS\nsecurity.protocol = SSL\nssl.ca.location=/ca.pem\n\n")
    env = {"MW_KAFKA_CONFIG": str(f), "MW_KAFKA_SSL_CA_LOCATION": "/other.pem"}
    assert client_properties(env) == {"security.protocol": "SSL", "ssl.ca.location": "/other.pem"}


def test_a_bad_file_or_a_property_the_guarantees_rest_on_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"MW_KAFKA_ACKS: acks is set by the kit"):
        client_properties({"MW_KAFKA_ACKS": "1"})
    with pytest.raises(ConfigError, match=r"cannot read it"):
        client_properties({"MW_KAFKA_CONFIG": str(tmp_path / "missing")})
    (tmp_path / "bad").write_text("enable.idempotence=false\n")
    with pytest.raises(ConfigError, match=r"line 1: enable.idempotence is set by the kit"):
        client_properties({"MW_KAFKA_CONFIG": str(tmp_path / "bad")})
    (tmp_path / "worse").write_text("just words\n")
    with pytest.raises(ConfigError, match=r"line 1 is not name=value"):
        client_properties({"MW_KAFKA_CONFIG": str(tmp_path / "worse")})


def test_productions_are_retried_for_at_most_30_s_and_nobody_lengthens_it() -> None:
    """A worker that lost an interval may still land its copy of an unacknowledged
    production until librdkafka gives up on it; consumers drop that copy only while its
    id is in their seen set (MW_SEEN_GC_SLACK_MS behind the watermark, 60 s by
    default; librdkafka's own timeout is 300 s)."""
    assert int(producer_config("b:1")["message.timeout.ms"]) <= 30_000
    with pytest.raises(ConfigError, match=r"message.timeout.ms is set by the kit"):
        client_properties({"MW_KAFKA_MESSAGE_TIMEOUT_MS": "300000"})
    with pytest.raises(ConfigError, match=r"delivery.timeout.ms is set by the kit"):
        client_properties({"MW_KAFKA_DELIVERY_TIMEOUT_MS": "300000"})


def test_every_client_gets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MW_KAFKA_SECURITY_PROTOCOL", "SSL")
    monkeypatch.setenv("MW_KAFKA_LINGER_MS", "7")
    for conf in (producer_config("b:1"), consumer_config("b:1", "g"), admin_config("b:1")):
        assert conf["security.protocol"] == "SSL" and conf["bootstrap.servers"] == "b:1"
    assert producer_config("b:1")["linger.ms"] == "7"  # a tuning of the user's wins over the kit's
    assert producer_config("b:1", **{"linger.ms": 0})["linger.ms"] == 0  # a call's own wins over both
    assert producer_config("b:1")["acks"] == "all"


def test_secrets_are_redacted() -> None:
    props = {
        "sasl.password": "p4ss",
        "ssl.key.password": "k",
        "sasl.jaas.config": "x",
        "ssl.key.pem": "-----",
        "sasl.oauthbearer.client.secret": "s",
        "sasl.username": "alice",
        "security.protocol": "SASL_SSL",
    }
    shown = redacted(props)
    assert {k for k, v in shown.items() if v == "***"} == {
        "sasl.password",
        "ssl.key.password",
        "sasl.jaas.config",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
    }
    assert shown["sasl.username"] == "alice"
