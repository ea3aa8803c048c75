"""Kafka ACLs keep the watermark topic the authority's (docs/security.md): on a broker
with an authorizer, ``mw acls --apply`` lets every principal of the pipeline use the
namespace's topics, and refuses a worker's principal a write to ``mw.watermarks``
(where a forged record would fire timers early). The negative control applies the same
bindings without the ``DENY`` ones, and the worker's forged watermark is written.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer

from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.transport.acls import apply, pipeline_acls
from mwcore.transport.topics import ensure_topics, topic_name
from mwcore.transport.watermark_topic import COMPACTED, watermark_topic
from mwcore.watermarks.published import Watermarks
from testbed.procs import ROOT
from testbed.topics import read_topic
from tests.support.secure import Certificates, acl_user_env, client_properties_of, secure_broker

pytestmark = [pytest.mark.hostile, pytest.mark.secure]


@dataclass
class Guarded:
    certs: Certificates
    broker: KafkaBroker
    sasl_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def env(self, user: str) -> dict[str, str]:
        """The ``MW_KAFKA_*`` variables that make the kit's clients ``user``."""
        return acl_user_env(self.certs, user)

    def write(self, user: str, topic: str, key: bytes, value: bytes) -> Any:
        """Write one record as ``user``: the delivery error, or None."""
        props = client_properties_of(self.env(user))
        p = Producer({"bootstrap.servers": self.bootstrap, **props, "message.timeout.ms": 15_000})
        errors: list[Any] = []
        p.produce(topic, value, key, on_delivery=lambda err, _m: errors.append(err))
        p.flush(30)
        return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    base = tmp_path_factory.mktemp("acls")
    certs = Certificates(base / "certs").make()
    broker, sasl_port = secure_broker(certs, base / "kafka", acls=True)
    broker.start()
    try:
        yield Guarded(certs, broker, sasl_port)
    finally:
        broker.stop()


def _forged(name: str) -> bytes:
    return Watermarks(name, "computation", 2**40, 2**40, 2**40, 2**40, 1).encode()


def _topics(g: Guarded, namespace: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    for k, v in g.env("admin").items():
        monkeypatch.setenv(k, v)
    wm, queries = watermark_topic(namespace), topic_name(namespace, "queries")
    ensure_topics(g.bootstrap, {wm: 1}, config=COMPACTED)
    ensure_topics(g.bootstrap, {queries: 1})
    return wm, queries


def test_only_the_authority_s_principal_writes_the_watermark_topic(
    guarded: Guarded, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = "guarded"
    wm, queries = _topics(guarded, namespace, monkeypatch)
    args = ["--namespace", namespace, "--authority", "User:authority", "--service", "User:worker", "--apply"]
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "acls", *args],
        env={**os.environ, **guarded.env("admin"), "MW_BOOTSTRAP": guarded.bootstrap},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["applied"] is True
    refused = guarded.write("worker", wm, b"windower", _forged("windower"))
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    assert guarded.write("worker", queries, b"q", b"a query") is None  # its own work goes on
    assert guarded.write("authority", wm, b"windower", _forged("windower")) is None
    for k, v in guarded.env("worker").items():
        monkeypatch.setenv(k, v)
    assert [m.key for m in read_topic(guarded.bootstrap, wm)] == [b"windower"]  # and it reads them


@pytest.mark.negative_control
def test_negative_control_without_the_deny_bindings_a_worker_forges_a_watermark(
    guarded: Guarded, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = "open"
    wm, _ = _topics(guarded, namespace, monkeypatch)
    acls = pipeline_acls(namespace, "User:authority", ["User:worker"])
    apply(guarded.bootstrap, [a for a in acls if a.permission == "ALLOW"])
    assert guarded.write("worker", wm, b"windower", _forged("windower")) is None


def test_mw_acls_names_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "acls", "--authority", "authority", "--service", "User:w"],
        env={k: v for k, v in os.environ.items() if not k.startswith("MW_")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "User:<name>" in done.stderr
