"""The registry client's bounds while running (``transport/schema_registry.py``): pure
logic, against a stand-in for confluent-kafka's client that counts what it is asked
(the real registry failing is ``tests/test_interop_registry.py``'s)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.schema_registry.error import SchemaRegistryError

from mwcore.errors import ConfigError
from mwcore.limits import MAX_SCHEMA_BYTES
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient

NUMBER = {"type": "record", "name": "Number", "fields": [{"name": "n", "type": "long"}]}


@dataclass
class Answer:
    schema_str: Any
    schema_type: str = "AVRO"
    references: Any = None


class Registry:
    """Answers ``get_schema`` from ``schemas``; ``down`` raises what an HTTP client does."""

    def __init__(self, schemas: dict[int, Answer]) -> None:
        self.schemas = schemas
        self.down = False
        self.asked: list[int] = []

    def get_schema(self, schema_id: int) -> Answer:
        self.asked.append(schema_id)
        if self.down:
            raise ConnectionRefusedError("[Errno 111] Connection refused")
        if schema_id not in self.schemas:
            raise SchemaRegistryError(404, 40403, f"Schema {schema_id} not found.")
        return self.schemas[schema_id]


def _client(registry: Registry, **bounds: float) -> RegistryClient:
    return RegistryClient(RegistryAccess("http://registry.invalid"), client=registry, **bounds)  # type: ignore[arg-type]


def test_an_id_is_asked_for_once() -> None:
    registry = Registry({7: Answer(json.dumps(NUMBER))})
    client = _client(registry)
    assert client.document(7) == NUMBER
    registry.down = True
    assert client.document(7) == NUMBER  # cached for good: an id names one schema
    assert registry.asked == [7]


def test_an_unknown_id_is_remembered_as_unknown_for_a_while() -> None:
    registry = Registry({})
    client = _client(registry, unknown_s=0.3)
    for _ in range(100):
        assert client.document(5) is None
    assert registry.asked == [5]  # junk ids cost no request each
    assert "has none" in client.why_unknown(5)
    time.sleep(0.35)
    registry.schemas[5] = Answer(json.dumps(NUMBER))
    assert client.document(5) == NUMBER  # asked again once the while is over


def test_an_unreachable_registry_is_waited_for_a_bounded_time_now_and_then() -> None:
    registry = Registry({})
    registry.down = True
    client = _client(registry, wait_s=0.3, wait_every_s=5.0, unknown_s=60)
    began = time.monotonic()
    assert client.document(1) is None
    waited = time.monotonic() - began
    assert 0.3 <= waited < 1.5, waited
    assert "cannot be reached" in client.why_unknown(1) and "after 0.3s" in client.why_unknown(1)
    began = time.monotonic()
    assert client.document(2) is None  # another id, within wait_every_s: no wait
    assert time.monotonic() - began < 0.1
    assert "waited for it lately" in client.why_unknown(2)


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (Answer(json.dumps(NUMBER), schema_type="PROTOBUF"), "not Avro"),
        (Answer("x" * (MAX_SCHEMA_BYTES + 1)), "too large"),
        (Answer(None), "missing"),
        (Answer("{not json"), "not JSON"),
        (Answer(json.dumps(NUMBER), references=[{"name": "other"}]), "refers to other schemas"),
    ],
)
def test_a_junk_answer_is_an_unknown_schema(answer: Answer, why: str) -> None:
    client = _client(Registry({3: answer}))
    assert client.document(3) is None
    assert why in client.why_unknown(3)


class Racing:
    """A registry where another deployer gives each new subject its level between this
    client's look and its own setting (what Apicurio answers then: 409)."""

    def __init__(self, refuse: bool = False) -> None:
        self.levels: dict[str, str] = {}
        self.registered: dict[str, str] = {}
        self.refuse = refuse  # a 409 with no level set after all: not a race, raised

    def get_subjects(self) -> list[str]:
        return list(self.registered)

    def lookup_schema(self, name: str, schema: Any) -> Any:
        raise SchemaRegistryError(404, 40401, f"Subject '{name}' not found.")

    def get_versions(self, name: str) -> list[int]:
        raise SchemaRegistryError(404, 40401, f"Subject '{name}' not found.")

    def get_compatibility(self, name: str) -> str:
        if name not in self.levels:
            raise SchemaRegistryError(404, 40408, "no level")
        return self.levels[name]

    def set_compatibility(self, name: str, level: str) -> None:
        if not self.refuse:
            self.levels[name] = "BACKWARD"  # the other deployer's, first
        raise SchemaRegistryError(409, 0, "A rule named 'COMPATIBILITY' already exists.")

    def register_schema(self, name: str, schema: Any) -> int:
        self.registered[name] = schema.schema_str
        return 11


def test_a_level_set_at_the_same_time_by_another_deployer_is_kept() -> None:
    from mwcore.serde.avro import SchemaRegistry

    local = SchemaRegistry()
    sv = local.add({**NUMBER, "namespace": "mw.t"})
    racing = Racing()
    client = RegistryClient(RegistryAccess("http://registry.invalid"), client=racing)  # type: ignore[arg-type]
    assert client.deploy({"ns.numbers": sv}) == {"ns.numbers": 11}
    assert racing.levels == {"ns.numbers-value": "BACKWARD"}
    refusing = Racing(refuse=True)
    client = RegistryClient(RegistryAccess("http://registry.invalid"), client=refusing)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"refused mw\.t\.Number v1 under ns\.numbers-value"):
        client.deploy({"ns.numbers": sv})
    assert refusing.registered == {}


def test_a_registry_pickles_with_a_client_of_its_own_to_the_same_registry() -> None:
    """Where a registry lands (a Spark executor), ids unknown there are looked up in the
    same schema registry, with the same bounds, by a client of its own."""
    import pickle

    from mwcore.serde.avro import SchemaRegistry

    access = RegistryAccess("http://registry.invalid", basic_auth="u:p")
    client = RegistryClient(access, unknown_s=7.0, client=Registry({7: Answer(json.dumps(NUMBER))}))  # type: ignore[arg-type]
    assert client.document(7) == NUMBER
    local = SchemaRegistry()
    local.use_ids(client)
    copy = pickle.loads(pickle.dumps(local))._ids
    assert isinstance(copy, RegistryClient) and copy is not client
    assert (copy.access, copy.unknown_s, copy._documents) == (access, 7.0, {})
