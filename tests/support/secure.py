"""A secured local stack for the ``secure`` tests: certificates made with openssl, an
Apache Kafka broker with a SASL_SSL listener (PLAIN and SCRAM-SHA-256 users), and a
redis-server that speaks only TLS and knows one ACL user (the default user is off).

The secrets are test values, made up here; the tests check that none of them shows
in a log line or an error.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.localproc import die_with_parent, free_port, stop_process, wait_for_port

PLAIN_USER, PLAIN_PASSWORD = "alice", "alice-kafka-s3cret"
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-kafka-s3cret"
REDIS_USER, REDIS_PASSWORD = "carol", "carol-redis-s3cret"
SECRETS = (PLAIN_PASSWORD, SCRAM_PASSWORD, REDIS_PASSWORD)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@dataclass
class Certificates:
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, and another CA
    that signed nothing here (a client that trusts only it must refuse the server)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def other_ca(self) -> Path:
        return self.directory / "other-ca.pem"

    @property
    def cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def key(self) -> Path:
        return self.directory / "server.key"

    @property
    def bundle(self) -> Path:
        """Key and certificate in one PEM file (Kafka's PEM keystore)."""
        return self.directory / "server-bundle.pem"

    def make(self) -> Certificates:
        d = self.directory
        d.mkdir(parents=True, exist_ok=True)
        for name in ("ca", "other-ca"):
            _openssl(
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=mw-test-{name}", cwd=d,
            )  # fmt: skip
        _openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=localhost", cwd=d,
        )  # fmt: skip
        (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        _openssl(
            "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-extfile", "san.ext", "-out", "server.pem", cwd=d,
        )  # fmt: skip
        self.bundle.write_text(self.key.read_text() + self.cert.read_text())
        return self


ACL_USERS = {
    "admin": "admin-kafka-s3cret",
    "authority": "authority-kafka-s3cret",
    "worker": "worker-kafka-s3cret",
}


def secure_broker(certs: Certificates, directory: Path, acls: bool = False) -> tuple[KafkaBroker, int]:
    """A broker whose clients' listener is SASL_SSL (its PLAINTEXT listener is for its
    own use: readiness and replication); returns it and the SASL_SSL port. With
    ``acls``, an authorizer and the PLAIN users of ``ACL_USERS`` (``admin`` a super
    user): nobody else may do anything an ACL does not allow."""
    port, sasl_port = free_port(), free_port()
    users = {PLAIN_USER: PLAIN_PASSWORD, **(ACL_USERS if acls else {})}
    jaas_plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{pw}"' for u, pw in users.items())
        + ";"
    )
    broker = KafkaBroker(
        port=port,
        directory=directory,
        extra={
            "listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port},"
            "CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},SASL_SSL://127.0.0.1:{sasl_port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas_plain,
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.bundle),
        },
        format_args=("--add-scram", f"SCRAM-SHA-256=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"),
    )
    if acls:
        broker.extra["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        broker.extra["super.users"] = "User:ANONYMOUS;User:admin"  # itself (PLAINTEXT), the admin
    broker.controller_port = free_port()
    broker.extra["listeners"] = broker.extra["listeners"].format(controller=broker.controller_port)
    return broker, sasl_port


@dataclass
class TlsRedis:
    """A redis-server on a TLS port only, with one ACL user and the default user off."""

    certs: Certificates
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="mw-tls-redis-")))
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def url(self, password: str = REDIS_PASSWORD, ca: Path | None = None) -> str:
        return (
            f"rediss://{REDIS_USER}:{password}@127.0.0.1:{self.port}/0"
            f"?ssl_ca_certs={ca or self.certs.ca}&ssl_cert_reqs=required"
        )

    def start(self, timeout: float = 20) -> TlsRedis:
        self.port = free_port()
        self.directory.mkdir(parents=True, exist_ok=True)
        args = [
            "redis-server", "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
            "--tls-cert-file", str(self.certs.cert), "--tls-key-file", str(self.certs.key),
            "--tls-ca-cert-file", str(self.certs.ca), "--tls-auth-clients", "no",
            "--user", "default", "off",
            "--user", REDIS_USER, "on", f">{REDIS_PASSWORD}", "~*", "&*", "+@all",
            "--dir", str(self.directory), "--save", "", "--appendonly", "yes", "--appendfsync", "always",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_parent
        )
        wait_for_port(self.port, self.proc, "redis-server (TLS)", timeout)
        deadline = time.monotonic() + timeout
        while True:
            client = redis.Redis.from_url(self.url())
            try:
                if client.ping():
                    return self
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc)


def acl_user_env(certs: Certificates, user: str) -> dict[str, str]:
    """The ``MW_KAFKA_*`` variables that make the kit's clients ``user`` of ``ACL_USERS``
    on a ``secure_broker(..., acls=True)``."""
    return {
        "MW_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MW_KAFKA_SASL_MECHANISM": "PLAIN",
        "MW_KAFKA_SASL_USERNAME": user,
        "MW_KAFKA_SASL_PASSWORD": ACL_USERS[user],
        "MW_KAFKA_SSL_CA_LOCATION": str(certs.ca),
    }


def client_properties_of(env: dict[str, str]) -> dict[str, str]:
    """``MW_KAFKA_<PROPERTY>`` variables as librdkafka properties (a client of the test's own)."""
    return {k.removeprefix("MW_KAFKA_").lower().replace("_", "."): v for k, v in env.items()}
