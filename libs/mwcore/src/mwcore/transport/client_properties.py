"""What every Kafka client of the kit gets besides its bootstrap servers: TLS, SASL,
and any other librdkafka client property, set in one documented way.

- ``MW_KAFKA_<PROPERTY>``: the property with its dots as underscores, any case:
  ``MW_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` is ``security.protocol``,
  ``MW_KAFKA_SASL_PASSWORD`` is ``sasl.password``.
- ``MW_KAFKA_CONFIG=<file>``: a properties file (``name=value`` lines, ``#`` comments),
  read first; a variable overrides the same property from the file.

Two names are not properties: ``MW_KAFKA_CONFIG`` itself and ``MW_KAFKA_HOME`` (where
``mw up`` keeps its broker's jars). A property the kit itself decides for its
guarantees (``enable.idempotence``, ``acks``, ``isolation.level``,
``enable.auto.commit``, ...) is refused: it would break exactly-once delivery.

Values of secret properties (passwords, keys, JAAS and OAuth settings) never appear
in a log line, a metric or an error: ``redacted`` shows them as ``***``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mwcore.errors import ConfigError

PREFIX = "MW_KAFKA_"
NOT_PROPERTIES = frozenset({"MW_KAFKA_CONFIG", "MW_KAFKA_HOME"})

# Set by the kit for its guarantees (transport/topics.py): not the user's to change.
RESERVED = frozenset(
    {
        "bootstrap.servers",
        "enable.idempotence",
        "acks",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "isolation.level",
        "group.id",
        "group.instance.id",
        "partition.assignment.strategy",
        "transactional.id",
        "message.timeout.ms",  # how long a lost interval's copies may land (topics.py)
        "delivery.timeout.ms",  # (its alias)
    }
)

_SECRET_WORDS = (
    "password",
    "secret",
    "jaas",
    "token",
    "key.pem",
    "keystore",
    "private",
    "oauthbearer.config",
)


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) or lowered.endswith(".key")


def redacted(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` fit for a log line: every secret value is ``***``."""
    return {k: ("***" if is_secret(k) else v) for k, v in props.items()}


def client_properties(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's client properties, from the file then the variables."""
    env = os.environ if environ is None else environ
    props: dict[str, str] = {}
    path = env.get("MW_KAFKA_CONFIG")
    if path:
        props.update(_read_file(Path(path)))
    for var, value in env.items():
        if var.upper().startswith(PREFIX) and var.upper() not in NOT_PROPERTIES:
            name = var[len(PREFIX) :].lower().replace("_", ".")
            _check(name, var)
            props[name] = value
    return props


def _read_file(path: Path) -> dict[str, str]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"MW_KAFKA_CONFIG={path}: cannot read it ({exc.strerror})") from None
    props: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"MW_KAFKA_CONFIG={path}: line {n} is not name=value")
        _check(name.strip(), f"MW_KAFKA_CONFIG={path} line {n}")
        props[name.strip()] = value.strip()
    return props


def _check(name: str, where: str) -> None:
    if name in RESERVED:
        raise ConfigError(f"{where}: {name} is set by the kit (its exactly-once delivery rests on it)")
