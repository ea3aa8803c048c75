"""Each network fault kind (``testbed/chaos/network.py``) does what it says to the proxy
it picks and undoes it, even when the wait is interrupted: a fault always heals. A fake
proxy records the calls; the kinds against real links are ``tests/test_network.py``."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from testbed.chaos.links import Link, Links
from testbed.chaos.network import HELD_MS, NETWORK_KINDS, play


@dataclass
class FakeProxy:
    name: str
    enabled: bool = True
    toxics: dict[str, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)

    def enable(self, on: bool = True) -> None:
        self.enabled = on
        self.seen.append(f"enabled={on}")

    def add(self, name: str, kind: str, stream: str, **attributes: Any) -> None:
        self.toxics[name] = (kind, stream, attributes)
        self.seen.append(f"+{kind}/{stream}")

    def remove(self, name: str) -> None:
        del self.toxics[name]


def _links() -> tuple[Links, dict[str, FakeProxy]]:
    links = Links(("w0", "w1", "authority"))
    proxies: dict[str, FakeProxy] = {}
    for slot in links.slots:
        redis, kafka = FakeProxy(f"{slot}-redis"), FakeProxy(f"{slot}-kafka")
        proxies |= {redis.name: redis, kafka.name: kafka}
        links.links[slot] = Link(slot, redis, kafka)  # type: ignore[arg-type]
    return links, proxies


@pytest.mark.parametrize("kind", NETWORK_KINDS)
def test_each_kind_hits_one_link_and_heals(kind: str) -> None:
    links, proxies = _links()
    during: list[dict[str, Any]] = []

    def sleep(s: float) -> None:
        during.append({n: (p.enabled, dict(p.toxics)) for n, p in proxies.items()})

    played = play(kind, random.Random(7), links, ["w0", "w1"], sleep=sleep)
    hit = [n for n, (on, toxics) in during[0].items() if not on or toxics]
    assert len(hit) == 1, during  # one link of one process
    slot, _, which = hit[0].partition("-")
    assert (slot == "authority") == (kind == "authority_partition"), hit
    if kind == "partition_redis":
        assert which == "redis"
    if kind == "partition_broker":
        assert which == "kafka"
    assert all(p.enabled and not p.toxics for p in proxies.values()), "not healed"
    assert played.target.startswith(f"{slot}:") and played.healed >= played.began


def test_a_drop_partition_holds_both_ways_and_an_interrupted_fault_still_heals() -> None:
    links, proxies = _links()

    def interrupted(s: float) -> None:
        held = [p for p in proxies.values() if p.toxics]
        assert [t[0] for t in held[0].toxics.values()] == ["latency", "latency"]
        assert {t[1] for t in held[0].toxics.values()} == {"upstream", "downstream"}
        assert all(t[2]["latency"] == HELD_MS for t in held[0].toxics.values())
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        play("partition_redis", random.Random(1), links, ["w0"], partition="drop", sleep=interrupted)
    assert all(p.enabled and not p.toxics for p in proxies.values()), "not healed"


def test_fault_seconds_replace_the_kinds_ranges() -> None:
    links, _ = _links()
    waits: list[float] = []
    for kind in NETWORK_KINDS:
        play(kind, random.Random(3), links, ["w0", "w1"], seconds=(2, 4), sleep=waits.append)
    assert len(waits) == len(NETWORK_KINDS) and all(2 <= w <= 4 for w in waits), waits


def test_each_proxied_client_gets_a_listener_advertising_its_proxy(tmp_path: Any) -> None:
    from mwcore.tools.stack.kafka_broker import KafkaBroker

    broker = KafkaBroker(directory=tmp_path, proxied={"PROXY_W0": 40001, "PROXY_AUTHORITY": 40002})
    broker.reserve_ports()
    props = broker.properties()
    listen = dict(x.split("://") for x in props["listeners"].split(","))
    advertised = dict(x.split("://") for x in props["advertised.listeners"].split(","))
    assert advertised["PROXY_W0"] == "127.0.0.1:40001" and advertised["PROXY_AUTHORITY"] == "127.0.0.1:40002"
    assert listen["PROXY_W0"] == f"127.0.0.1:{broker.proxied_ports['PROXY_W0']}" != advertised["PROXY_W0"]
    assert "PROXY_W0:PLAINTEXT" in props["listener.security.protocol.map"]
    assert advertised["PLAINTEXT"] == broker.bootstrap  # the others' listener is as before
