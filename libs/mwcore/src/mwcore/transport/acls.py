"""The Kafka ACLs that make a namespace's control topics writable only by
their owners, on a cluster with an authorizer (docs/security.md).

Every principal of the pipeline (the authority's and the services') may use the
namespace's topics (read, write, create, describe) and consumer groups, and the
transactional ids under the namespace's prefix (``transport/transactions.py``: write and
describe, with idempotent writes on the cluster) that transactional productions use. On top of
that, ``DENY`` bindings (which win over any ``ALLOW``) keep every principal but its
owner from writing, deleting or reconfiguring an owned topic: ``mw.watermarks`` is
the authority's, and ``--writer STREAM=PRINCIPAL`` gives a stream one writer (such as
``model_updates`` the model job's). A worker's principal that writes a forged
watermark is then refused by the broker.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from mwcore.errors import ConfigError
from mwcore.transport.topics import admin_config, topic_name
from mwcore.transport.transactions import transactional_prefix
from mwcore.transport.watermark_topic import watermark_topic

# The cluster resource's one name (librdkafka calls its type BROKER, Kafka CLUSTER)
CLUSTER = "kafka-cluster"
# What an owner keeps to itself on its topic (others may still read and describe it)
OWNED = (AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALTER_CONFIGS)


@dataclass(frozen=True)
class Acl:
    """One binding, as ``mw acls`` prints and applies it."""

    permission: str  # ALLOW or DENY
    principal: str  # User:name
    operation: str  # ALL, WRITE, ...
    resource: str  # TOPIC, GROUP, TRANSACTIONAL_ID or BROKER (the cluster)
    pattern: str  # LITERAL or PREFIXED
    name: str

    def binding(self) -> AclBinding:
        return AclBinding(
            ResourceType[self.resource],
            self.name,
            ResourcePatternType[self.pattern],
            self.principal,
            "*",
            AclOperation[self.operation],
            AclPermissionType[self.permission],
        )

    def line(self) -> str:
        return (
            f"{self.permission} {self.principal} {self.operation} on {self.resource} "
            f"{self.pattern.lower()} {self.name!r}"
        )


def _principal(value: str) -> str:
    if not value.startswith("User:") or len(value) <= len("User:"):
        raise ConfigError(f"{value!r} is not a Kafka principal (User:<name>)")
    return value


def pipeline_acls(
    namespace: str, authority: str, services: Iterable[str], writers: Mapping[str, str] | None = None
) -> list[Acl]:
    """The bindings for ``namespace``: everyone of the pipeline uses its topics and
    groups; ``mw.watermarks`` is written only by ``authority``, and each stream of
    ``writers`` only by its principal."""
    owners = {watermark_topic(namespace): _principal(authority)}
    for stream, principal in (writers or {}).items():
        owners[topic_name(namespace, stream)] = _principal(principal)
    everyone = sorted({_principal(authority), *(_principal(s) for s in services), *owners.values()})
    # the default namespace's topics are not prefixed: then every topic is the pipeline's
    topics = ("LITERAL", "*") if namespace == "default" else ("PREFIXED", f"{namespace}.")
    out: list[Acl] = []
    txn = transactional_prefix(namespace)
    for p in everyone:
        out.append(Acl("ALLOW", p, "ALL", "TOPIC", *topics))
        out.append(Acl("ALLOW", p, "READ", "GROUP", "LITERAL", "*"))
        out.append(Acl("ALLOW", p, "DESCRIBE", "GROUP", "LITERAL", "*"))
        # transactional productions: each interval's producer under the kit's prefix
        out.append(Acl("ALLOW", p, "WRITE", "TRANSACTIONAL_ID", "PREFIXED", txn))
        out.append(Acl("ALLOW", p, "DESCRIBE", "TRANSACTIONAL_ID", "PREFIXED", txn))
        out.append(Acl("ALLOW", p, "IDEMPOTENT_WRITE", "BROKER", "LITERAL", CLUSTER))
    for topic, owner in sorted(owners.items()):
        for p in everyone:
            if p != owner:
                out += [Acl("DENY", p, op.name, "TOPIC", "LITERAL", topic) for op in OWNED]
    return out


def apply(bootstrap: str, acls: list[Acl], timeout: float = 30.0) -> None:
    """Create the bindings (as the client properties' principal: an administrator)."""
    admin = AdminClient(admin_config(bootstrap))
    for binding, future in admin.create_acls([a.binding() for a in acls], request_timeout=timeout).items():
        try:
            future.result(timeout)
        except Exception as exc:
            raise ConfigError(f"cannot create the ACL {binding}: {exc}") from None
