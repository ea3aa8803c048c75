"""``mw schemas list|check|import``: a running namespace's subjects in the schema registry.

- ``list``: each subject of the namespace's topics (``<topic>-value``): its versions,
  the latest's id and schema, its compatibility level. One JSON object a line.
- ``check``: whether the schemas directory's latest version of each subject's schema
  is one the subject would accept (what a deploy of it would find); exit 1 if not.
- ``import``: the writer schemas on the namespace's ``mw.schemas`` topic, registered
  under the subjects of the topics whose values name them (oldest version first), so
  that readers moved to the Confluent framing find every writer: the first step of a
  migration (docs/ecosystem.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mwcore.errors import ConfigError
from mwcore.serde.avro import SchemaRegistry, SchemaVersion
from mwcore.transport.fingerprints import writer_fingerprints
from mwcore.transport.schema_registry import RegistryClient, subject
from mwcore.transport.schema_topic import SCHEMAS_STREAM, SchemaTopic
from mwcore.transport.topics import topic_name, topic_partitions


def namespace_subjects(client: RegistryClient, namespace: str) -> list[str]:
    prefix = "" if namespace == "default" else f"{namespace}."
    return sorted(s for s in client.subjects() if s.endswith("-value") and s.startswith(prefix))


def list_subjects(client: RegistryClient, namespace: str, out: Callable[[str], None] = print) -> int:
    for name in namespace_subjects(client, namespace):
        out(json.dumps(client.describe(name)))
    return 0


def check_subjects(
    client: RegistryClient, registry: SchemaRegistry, namespace: str, out: Callable[[str], None] = print
) -> int:
    refused = 0
    for name in namespace_subjects(client, namespace):
        latest = client.describe(name)
        schema = latest.get("schema")
        if not isinstance(schema, str) or schema not in registry.names():
            out(
                json.dumps(
                    {"subject": name, "schema": schema, "checked": False, "why": "not in the directory"}
                )
            )
            continue
        sv = registry.latest(schema)
        ok = client.compatible(name, sv)
        refused += not ok
        out(json.dumps({"subject": name, "schema": sv.name, "version": sv.version, "compatible": ok}))
    return 1 if refused else 0


def import_schemas(
    client: RegistryClient, bootstrap: str, namespace: str, out: Callable[[str], None] = print
) -> int:
    """Register each writer schema of ``mw.schemas`` under the subjects of the topics that
    use it; the number registered."""
    schemas = SchemaTopic(bootstrap, namespace)
    schemas.refresh()
    own = topic_name(namespace, SCHEMAS_STREAM)
    prefix = "" if namespace == "default" else f"{namespace}."
    topics = sorted(t for t in topic_partitions(bootstrap) if t.startswith(prefix) and t != own)
    done = 0
    for topic in topics:
        used = writer_fingerprints(bootstrap, topic)
        versions: list[SchemaVersion] = []
        for fp in used:
            document = schemas.documents.get(fp)
            if document is None or fp in schemas.conflicts:
                out(json.dumps({"topic": topic, "fingerprint": f"{fp:016x}", "imported": False}))
                continue
            try:
                versions.append(SchemaRegistry().add_writer(document, fp))
            except ConfigError as exc:
                out(
                    json.dumps(
                        {"topic": topic, "fingerprint": f"{fp:016x}", "imported": False, "why": str(exc)}
                    )
                )
        for sv in sorted(versions, key=lambda v: v.version):
            ids = client.deploy({topic: sv})
            done += 1
            line: dict[str, Any] = {"subject": subject(topic), "schema": sv.name, "version": sv.version}
            out(json.dumps({**line, "id": ids[topic], "fingerprint": f"{sv.fingerprint:016x}"}))
    schemas.close()
    return done
