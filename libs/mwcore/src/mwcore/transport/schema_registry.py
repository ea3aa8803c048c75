"""The schema registry, as the kit uses it: subjects registered at deploy, schemas read
by id while running.

Any registry with the Confluent REST API works (Confluent's own, Karapace,
Redpanda's, Apicurio's ``/apis/ccompat/v7``); the kit talks to it only through
confluent-kafka's ``SchemaRegistryClient``, reached at ``MW_SCHEMA_REGISTRY_URL``.

- **Subjects** follow TopicNameStrategy: a stream's values are ``<topic>-value``.
  ``deploy`` registers what a computation or an injector writes (and the schema each
  input is read with) under its topics' subjects: it first tests every one against
  its subject's versions, so an incompatible schema is refused before anything is
  registered (``ConfigError``, one line). A subject the kit creates gets the
  compatibility level ``MW_SCHEMA_COMPATIBILITY`` (FULL_TRANSITIVE by default: each
  version reads every other, so upgrades work producer first or consumer first); a
  subject that has a level of its own keeps it.
- **Ids read while running** (``document``, the serde's ``IdSource``) are cached for
  good (an id names one schema forever). An id the registry does not have is
  remembered as unknown for ``unknown_s``, so junk ids cost no request each. A
  registry that cannot be reached is waited for at most ``wait_s``, at most once
  every ``wait_every_s`` whatever the id; then the id counts as unknown (its records
  are dead letters naming why). So a registry down costs a worker at most ``wait_s``
  of every ``wait_every_s``, and records whose schemas it has cached go on.
- **What it answers is checked.** A schema that is not a small, valid Avro document,
  or not Avro at all, is unknown, never decoded with (semantics I-12).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import structlog
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mwcore.errors import ConfigError, shown_url
from mwcore.limits import MAX_SCHEMA_BYTES
from mwcore.serde.avro import SchemaRegistry as LocalSchemas
from mwcore.serde.avro import SchemaVersion
from mwcore.serde.framing import Framing, Wire

log = structlog.get_logger("mwcore.transport.schema_registry")

Compatibility = Literal[
    "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE"
]
COMPATIBILITIES: tuple[str, ...] = get_args(Compatibility)
MAX_UNKNOWN = 10_000  # ids remembered as unknown (the oldest forgotten first)
_NOT_FOUND = 404
_CONFLICT = 409
_SUBJECT_NOT_FOUND = 40401
_NO_LEVEL = 40408  # the subject has no compatibility level of its own


def registered_framings(
    owner: str,
    client: RegistryClient | None,
    wires: Mapping[str, tuple[Wire, Wire | None]],
    schemas: Mapping[str, SchemaVersion],
) -> dict[str, Framing]:
    """Each topic's framing (``wires``: topic -> what it writes and reads, what it reads
    too), with the registry ids of those framed ``"confluent"``: their schemas (``schemas``:
    topic -> schema) registered under their subjects, or none if one is refused
    (``ConfigError``, as for a registry that is not set or cannot be reached). Where no
    stream is framed ``"confluent"``, nor reads it, no registry is needed."""
    if all("confluent" not in pair for pair in wires.values()):
        return {t: Framing(wire, None, also) for t, (wire, also) in wires.items()}
    if client is None:
        raise ConfigError(
            f'{owner}: streams framed "confluent" need a schema registry: set MW_SCHEMA_REGISTRY_URL'
        )
    client.check_reachable()
    confluent = {t: schemas[t] for t, (wire, _) in wires.items() if wire == "confluent"}
    ids = client.deploy(confluent) if confluent else {}
    return {t: Framing(wire, ids.get(t), also) for t, (wire, also) in wires.items()}


def subject(topic: str) -> str:
    """The subject of a topic's values (TopicNameStrategy)."""
    return f"{topic}-value"


@dataclass(frozen=True)
class RegistryAccess:
    """How the registry is reached: its URL (several, comma-separated, are tried in
    turn), basic auth (``user:password``), the CA that signed its certificate and a
    client certificate and key (mutual TLS)."""

    url: str
    basic_auth: str | None = None
    ca: str | None = None
    certificate: str | None = None
    key: str | None = None
    timeout_s: float = 5.0

    def client_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"url": self.url, "timeout": self.timeout_s, "max.retries": 0}
        if self.basic_auth:
            conf["basic.auth.user.info"] = self.basic_auth
        if self.ca:
            conf["ssl.ca.location"] = self.ca
        if self.certificate:
            conf["ssl.certificate.location"] = self.certificate
        if self.key:
            conf["ssl.key.location"] = self.key
        return conf


class Unreachable(Exception):
    """The registry did not answer (the network, or a 5xx)."""


def _client_of(access: RegistryAccess, bounds: dict[str, Any]) -> RegistryClient:
    return RegistryClient(access, **bounds)


class RegistryClient:
    """One registry, for one process: ``deploy`` at start, ``document`` while running."""

    def __init__(
        self,
        access: RegistryAccess,
        *,
        compatibility: Compatibility = "FULL_TRANSITIVE",
        wait_s: float = 2.0,
        wait_every_s: float = 10.0,
        unknown_s: float = 30.0,
        client: SchemaRegistryClient | None = None,
    ) -> None:
        self.access = access
        self.compatibility = compatibility
        self.wait_s = wait_s
        self.wait_every_s = wait_every_s
        self.unknown_s = unknown_s
        self._client = client or SchemaRegistryClient(access.client_config())
        self._documents: dict[int | str, Any] = {}
        self._unknown: OrderedDict[int | str, tuple[float, str]] = OrderedDict()  # id -> (until when, why)
        self._waited = -wait_every_s

    def __reduce__(self) -> tuple[Any, ...]:
        # where a registry that looks ids up here lands (a Spark executor): a client of
        # its own to the same registry, with the same bounds, its cache empty
        bounds = {
            "compatibility": self.compatibility,
            "wait_s": self.wait_s,
            "wait_every_s": self.wait_every_s,
            "unknown_s": self.unknown_s,
        }
        return (_client_of, (self.access, bounds))

    # -- at start ------------------------------------------------------------------------

    def check_reachable(self) -> None:
        """``ConfigError`` (one line) unless the registry answers."""
        try:
            self._call(self._client.get_subjects)
        except Unreachable as exc:
            raise ConfigError(
                f"the schema registry at {shown_url(self.access.url)} cannot be reached ({exc}): "
                "start it, or set MW_SCHEMA_REGISTRY_URL to one that runs"
            ) from None
        except SchemaRegistryError as exc:
            raise ConfigError(
                f"the schema registry at {shown_url(self.access.url)} refused the kit: {exc}"
            ) from None

    def deploy(self, wanted: Mapping[str, SchemaVersion]) -> dict[str, int]:
        """Register each topic's schema under its subject (``wanted``: topic -> schema);
        each topic's schema id. Every schema is tested first: one that its subject's
        compatibility refuses is a ``ConfigError`` and nothing is registered."""
        self.check_reachable()
        pending: list[tuple[str, str, SchemaVersion, Schema]] = []
        ids: dict[str, int] = {}
        for topic, sv in wanted.items():
            name = subject(topic)
            schema = _schema(sv)
            try:
                found = self._call(self._client.lookup_schema, name, schema)
                ids[topic] = int(found.schema_id)
                continue
            except SchemaRegistryError as exc:
                if exc.http_status_code != _NOT_FOUND:
                    raise self._refused(name, sv, exc) from None
            versions = self._versions(name)
            if versions:
                try:
                    ok = self._call(self._client.test_compatibility, name, schema)
                except SchemaRegistryError as exc:
                    raise self._refused(name, sv, exc) from None
                if not ok:
                    level = self._level(name)
                    raise ConfigError(
                        f"{sv.name} v{sv.version} is incompatible with the versions of {name} already in the "
                        f"schema registry ({level}): nothing registered"
                    )
            pending.append((topic, name, sv, schema))
        for topic, name, sv, schema in pending:
            try:
                if not self._versions(name) and self._level(name) is None:
                    self._set_level(name)
                ids[topic] = int(self._call(self._client.register_schema, name, schema))
            except SchemaRegistryError as exc:
                raise self._refused(name, sv, exc) from None
            log.info("schema_registered", subject=name, schema=sv.name, version=sv.version, id=ids[topic])
        for topic, sv in wanted.items():
            self._documents.setdefault(ids[topic], sv.document)
        return ids

    def _set_level(self, name: str) -> None:
        """Give a new subject the kit's compatibility level. Another process deploying the
        same subject at the same time may set it first (Apicurio answers 409: "A rule named
        'COMPATIBILITY' already exists"): the subject then has a level, which it keeps."""
        try:
            self._call(self._client.set_compatibility, name, self.compatibility)
        except SchemaRegistryError as exc:
            if exc.http_status_code != _CONFLICT or self._level(name) is None:
                raise

    def _versions(self, name: str) -> list[int]:
        try:
            return list(self._call(self._client.get_versions, name))
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                return []
            raise

    def _level(self, name: str) -> str | None:
        try:
            return str(self._call(self._client.get_compatibility, name))
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND or exc.error_code in (_NO_LEVEL, _SUBJECT_NOT_FOUND):
                return None
            raise

    def _refused(self, name: str, sv: SchemaVersion, exc: SchemaRegistryError) -> ConfigError:
        return ConfigError(f"the schema registry refused {sv.name} v{sv.version} under {name}: {exc}")

    # -- for the `mw schemas` commands ---------------------------------------------------

    def subjects(self) -> list[str]:
        return [str(s) for s in self._call(self._client.get_subjects)]

    def describe(self, name: str) -> dict[str, Any]:
        """A subject: its versions, the latest's id and schema's name, its compatibility."""
        latest = self._call(self._client.get_latest_version, name)
        schema_name: str | None = None
        document, _ = _avro_document(latest.schema)
        if isinstance(document, dict):
            space = document.get("namespace")
            schema_name = str(document.get("name"))
            if space and "." not in schema_name:
                schema_name = f"{space}.{schema_name}"
        return {
            "subject": name,
            "versions": self._versions(name),
            "id": latest.schema_id,
            "schema": schema_name,
            "compatibility": self._level(name) or "(the registry's default)",
        }

    def compatible(self, name: str, sv: SchemaVersion) -> bool:
        """Whether ``name`` would accept ``sv`` (registered already counts)."""
        try:
            self._call(self._client.lookup_schema, name, _schema(sv))
            return True
        except SchemaRegistryError as exc:
            if exc.http_status_code != _NOT_FOUND:
                raise
        return bool(self._call(self._client.test_compatibility, name, _schema(sv)))

    def learn_subjects(self, registry: LocalSchemas, topics: list[str]) -> int:
        """Every version of each topic's subject into ``registry`` by id (for readers that
        run offline, such as Spark executors); how many it learnt."""
        learnt = 0
        names = set(self.subjects())
        for topic in topics:
            name = subject(topic)
            if name not in names:
                continue
            for version in self._versions(name):
                found = self._call(self._client.get_version, name, version)
                document, _ = _avro_document(found.schema)
                if document is None:
                    continue
                try:
                    registry.learn_id(int(found.schema_id), registry.add_writer(document))
                    learnt += 1
                except ConfigError:
                    continue
        return learnt

    # -- while running -------------------------------------------------------------------

    def document(self, schema_id: int | str) -> Any | None:
        """The schema with ``schema_id`` (its JSON document; a ``str``: a schema GUID,
        which registries serve from Confluent Platform 8 on), or None (see the module doc)."""
        document = self._documents.get(schema_id)
        if document is not None:
            return document
        now = time.monotonic()
        unknown = self._unknown.get(schema_id)
        if unknown is not None and now < unknown[0]:
            return None
        found, why = self._ask(schema_id, now)
        if found is None:
            self._unknown[schema_id] = (time.monotonic() + self.unknown_s, why)
            self._unknown.move_to_end(schema_id)
            while len(self._unknown) > MAX_UNKNOWN:
                self._unknown.popitem(last=False)
            log.warning("schema_unknown", registry=self.access.url, id=schema_id, why=why)
            return None
        self._unknown.pop(schema_id, None)
        self._documents[schema_id] = found
        log.info("schema_learnt", registry=self.access.url, id=schema_id)
        return found

    def why_unknown(self, schema_id: int | str) -> str:
        unknown = self._unknown.get(schema_id)
        return "the schema registry has none" if unknown is None else unknown[1]

    def _ask(self, schema_id: int | str, now: float) -> tuple[Any | None, str]:
        deadline = None
        while True:
            try:
                if isinstance(schema_id, str):
                    schema = self._call(self._client.get_schema_by_guid, schema_id)
                else:
                    schema = self._call(self._client.get_schema, schema_id)
            except SchemaRegistryError as exc:
                return None, f"the schema registry has none ({exc.http_status_code})"
            except Unreachable as exc:
                if deadline is None:
                    if now - self._waited < self.wait_every_s:
                        return None, f"the schema registry cannot be reached ({exc}); waited for it lately"
                    self._waited = now
                    deadline = now + self.wait_s
                if time.monotonic() >= deadline:
                    return None, f"the schema registry cannot be reached ({exc}) after {self.wait_s}s"
                time.sleep(0.1)
                continue
            return _avro_document(schema)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except SchemaRegistryError as exc:
            if exc.http_status_code >= 500 or exc.http_status_code < 0:
                raise Unreachable(str(exc)) from None
            raise
        except Exception as exc:  # the HTTP client's errors: refused, timed out, TLS, junk
            raise Unreachable(f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        self._client.__exit__()  # type: ignore[no-untyped-call]  # (its close, typed)


def _schema(sv: SchemaVersion) -> Schema:
    return Schema(json.dumps(sv.document, separators=(",", ":")), "AVRO")


def _avro_document(schema: Any) -> tuple[Any | None, str]:
    kind = getattr(schema, "schema_type", None) or "AVRO"
    text = getattr(schema, "schema_str", None)
    if kind != "AVRO":
        return None, f"it is a {kind} schema, not Avro"
    if not isinstance(text, str) or len(text.encode()) > MAX_SCHEMA_BYTES:
        return None, "its schema is missing or too large"
    if getattr(schema, "references", None):
        return None, "it refers to other schemas (references are not supported)"
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError):
        return None, "its schema is not JSON"
