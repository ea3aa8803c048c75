"""The framing the suite writes and reads its test streams in, and writers and readers in it.

The suite runs on the kit's default framing (``WorkerConfig.wire``), or on the one
``MW_WIRE`` names (the same variable the workers it starts read): so the whole suite
can be run on either framing, and tests, workers and services agree on it. Tests of
one framing in particular (``tests/test_interop*.py``) say so themselves.

For ``"confluent"``, a test's stream has its subject registered in the stack's schema
registry (as a producer outside the kit would), and the test's schemas learn writer
schemas by id from it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import Any, Protocol, cast, get_args

from mwcore.api.signing import UNSIGNED, MacV1, Signer
from mwcore.runtime.config import WorkerConfig
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import MAX_SCHEMA_ID, SINGLE_OBJECT, Framing, Wire, check_wire
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient, registered_framings
from mwcore.transport.writer import SourceWriter

SUITE_WIRE: Wire = check_wire(
    os.environ.get("MW_WIRE") or WorkerConfig.model_fields["wire"].default, "MW_WIRE"
)


class Stack(Protocol):
    """What of a stack the helpers use (``LocalStack``, or a cluster of the tests')."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def schema_registry_url(self) -> str | None: ...


@cache
def _client(url: str) -> RegistryClient:
    return RegistryClient(RegistryAccess(url))


def registry_client(stack: Stack) -> RegistryClient | None:
    """One client a registry, for the whole session (None: the stack has no registry)."""
    return None if stack.schema_registry_url is None else _client(stack.schema_registry_url)


def framing(
    stack: Stack, registry: SchemaRegistry, topic: str, schema: str, wire: Wire = SUITE_WIRE
) -> Framing:
    """How ``topic``'s values (of ``schema``, a name in ``registry``) are framed in
    ``wire``: the suite's unless told. Confluent: the schema registered under the topic's
    subject, and ``registry`` reading writer schemas by id from the stack's registry."""
    if wire == "single-object":
        return SINGLE_OBJECT
    client = registry_client(stack)
    if client is not None:
        registry.use_ids(client)
    sv = registry.latest(schema)
    return registered_framings("the test", client, {topic: (wire, None)}, {topic: sv})[topic]


def serde(
    stack: Stack, registry: SchemaRegistry, topic: str, schema: str, wire: Wire = SUITE_WIRE
) -> AvroSerde:
    """``schema``'s serde for ``topic``, in ``wire``: what a test writes to the topic, or
    reads back from it (a production of a worker of the suite)."""
    return AvroSerde(registry, schema, framing=framing(stack, registry, topic, schema, wire))


def source_writer(
    stack: Stack, registry: SchemaRegistry, topic: str, schema: str, wire: Wire = SUITE_WIRE, **kw: Any
) -> SourceWriter:
    """A ``SourceWriter`` of ``schema`` to ``topic`` in ``wire`` (``kw``: the writer's own)."""
    return SourceWriter(
        stack.bootstrap, registry, topic, schema, framing=framing(stack, registry, topic, schema, wire), **kw
    )


def foreign(wire: Wire = SUITE_WIRE) -> Framing:
    """A framing naming a writer schema the pipeline cannot know, with a foreign schema's
    serde: its own fingerprint (single-object), or an id the stack's registry has not
    given (confluent: the last there is)."""
    return SINGLE_OBJECT if wire == "single-object" else Framing("confluent", MAX_SCHEMA_ID)


def injector_args(stack: Stack) -> dict[str, Any]:
    """What an ``Injector`` of a test is given to write in the suite's framing."""
    return {"wire": SUITE_WIRE, "schema_registry": registry_client(stack)}


def registry_env(stack: Stack) -> dict[str, str]:
    """The stack's registry as a process's setting (none where the stack has none)."""
    url = stack.schema_registry_url
    return {} if url is None else {"MW_SCHEMA_REGISTRY_URL": url}


def of(env: Mapping[str, str]) -> Wire:
    """The framing a process of environment ``env`` writes and reads: its ``MW_WIRE``,
    else the suite's."""
    return check_wire(env["MW_WIRE"], "MW_WIRE") if env.get("MW_WIRE") else SUITE_WIRE


def signer_of(env: Mapping[str, str]) -> Signer:
    """How a process of environment ``env`` signs and checks records: its
    ``MW_ID_SECRET`` (none: nothing signed), with MACs of version 1 as its ``MW_MAC_V1``
    says (an older library's variant says ``write``: version 1 is all it checks)."""
    secret = env.get("MW_ID_SECRET")
    mac_v1 = env.get("MW_MAC_V1") or "off"
    if mac_v1 not in get_args(MacV1):
        raise ValueError(f"MW_MAC_V1 must be one of {get_args(MacV1)}, got {mac_v1!r}")
    return Signer(secret, cast(MacV1, mac_v1)) if secret else UNSIGNED
