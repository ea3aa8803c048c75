"""Secured clusters: Kafka over SASL_SSL and Redis over TLS with an ACL user.

The fixture makes its own certificates (openssl), starts an Apache Kafka broker with a
SASL_SSL listener (users for PLAIN and SCRAM-SHA-256) and a redis-server that speaks
only TLS with the default user off (``tests/support/secure.py``). The kit reaches them
through ``MW_KAFKA_<PROPERTY>`` variables and a ``rediss://`` URL, and keeps exactly
once through a worker's SIGKILL. A wrong password or an untrusted certificate stops a
worker at start with one line saying what to fix (exit code 2), and no secret shows in
any log line or error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.preflight import check_kafka
from testbed.procs import ROOT, joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import COMPUTATION, Deployment, Injector, make_inputs, verify
from tests.support.secure import (
    PLAIN_PASSWORD,
    PLAIN_USER,
    REDIS_PASSWORD,
    SCRAM_PASSWORD,
    SCRAM_USER,
    SECRETS,
    Certificates,
    TlsRedis,
    secure_broker,
)

pytestmark = pytest.mark.secure


@dataclass
class Secured:
    certs: Certificates
    broker: KafkaBroker
    sasl_port: int
    redis: TlsRedis
    schema_registry_url: str | None  # the session stack's (the registry is not what is secured here)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, stack: LocalStack) -> Iterator[Secured]:
    base = tmp_path_factory.mktemp("secure")
    certs = Certificates(base / "certs").make()
    broker, sasl_port = secure_broker(certs, base / "kafka")
    broker.start()
    try:
        tls_redis = TlsRedis(certs, base / "redis").start()
        try:
            yield Secured(certs, broker, sasl_port, tls_redis, stack.schema_registry_url)
        finally:
            tls_redis.stop()
    finally:
        broker.stop()


def kafka_env(mechanism: str, user: str, password: str, ca: Path) -> dict[str, str]:
    return {
        "MW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MW_KAFKA_SASL_MECHANISM": mechanism,
        "MW_KAFKA_SASL_USERNAME": user,
        "MW_KAFKA_SASL_PASSWORD": password,
        "MW_KAFKA_SSL_CA_LOCATION": str(ca),
    }


def test_plain_and_scram_users_get_in(secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    for mechanism, user, password in (
        ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
        ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
    ):
        for k, v in kafka_env(mechanism, user, password, secured.certs.ca).items():
            monkeypatch.setenv(k, v)
        check_kafka(secured.bootstrap, timeout_s=20)


@pytest.mark.exactly_once
def test_exactly_once_over_sasl_ssl_and_tls_redis(
    secured: Secured,
    registry: SchemaRegistry,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k, v in kafka_env("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD, secured.certs.ca).items():
        monkeypatch.setenv(k, v)  # the workers inherit them; the test's own clients read them
    dep = Deployment(
        secured.bootstrap,
        secured.redis.url(),
        namespace,
        ROOT / "schemas",
        tmp_path,
        schema_registry_url=secured.schema_registry_url,
    )
    inputs = make_inputs(20_000, 200, dup_rate=0.01, seed=29)
    workers = [dep.add_worker("w0").start(), dep.add_worker("w1").start()]
    writer = source_writer(secured, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 90, what="two checkpoints per interval")
        workers[0].kill()
        workers[0].start()
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        for w in workers:
            w.terminate()
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)
    logs = "\n".join(w.logs() for w in workers)
    assert '"assigned"' in logs
    assert not [s for s in SECRETS if s in logs], "a secret is in a worker's log"


def _start_worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MW_")}
    full = base | env | {"MW_SCHEMAS_DIR": str(ROOT / "schemas"), "MW_NAMESPACE": "refusals"}
    return subprocess.run(
        [sys.executable, "-m", "mwcore", "run", COMPUTATION],
        env=full,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize(
    "case",
    [
        "kafka wrong password",
        "kafka untrusted certificate",
        "redis wrong password",
        "redis untrusted certificate",
    ],
)
def test_a_wrong_password_or_an_untrusted_certificate_stops_the_worker_with_one_line(
    secured: Secured, tmp_path: Path, case: str
) -> None:
    good_kafka = kafka_env("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD, secured.certs.ca)
    env = {"MW_BOOTSTRAP": secured.bootstrap, "MW_REDIS_URL": secured.redis.url(), **good_kafka}
    expected = {
        "kafka wrong password": "the broker refused the SASL credentials for MW_KAFKA_SASL_USERNAME=bob",
        "kafka untrusted certificate": "TLS certificate is not trusted (set MW_KAFKA_SSL_CA_LOCATION",
        "redis wrong password": "Redis refused the user name or password",
        "redis untrusted certificate": "the Redis server's TLS certificate is not trusted",
    }[case]
    if case == "kafka wrong password":
        env["MW_KAFKA_SASL_PASSWORD"] = "not-" + SCRAM_PASSWORD
    elif case == "kafka untrusted certificate":
        env["MW_KAFKA_SSL_CA_LOCATION"] = str(secured.certs.other_ca)
    elif case == "redis wrong password":
        env["MW_REDIS_URL"] = secured.redis.url(password="not-" + REDIS_PASSWORD)
    else:
        env["MW_REDIS_URL"] = secured.redis.url(ca=secured.certs.other_ca)
    done = _start_worker(env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(lines) == 1 and expected in lines[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    print(lines[0])
    shown = done.stdout + done.stderr
    assert not [s for s in SECRETS if s in shown], shown
