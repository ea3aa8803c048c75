"""Each process's own links to Redis and to the broker, through Toxiproxy (``--network``).

A slot (``w0``, ``w1``, ..., ``authority``) is a process and every restart of it. Each
slot has two proxies of its own on one ``toxiproxy-server``: one in front of Redis, and
one in front of a broker listener of its own (``KafkaBroker.proxied``), which
advertises the proxy's address, so every connection the slot's Kafka clients open
(bootstrap, then the partition leaders and the group coordinator the metadata names)
goes through its proxy. A fault on one slot's link leaves the others alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

from mwcore.tools.stack.kafka_broker import KafkaBroker
from mwcore.tools.stack.localproc import free_port
from testbed.toxiproxy import Proxy, ToxiproxyServer


@dataclass
class Link:
    slot: str
    redis: Proxy
    kafka: Proxy

    def of(self, which: str) -> Proxy:
        return self.redis if which == "redis" else self.kafka


@dataclass
class Links:
    slots: tuple[str, ...]
    dialled: dict[str, int] = field(default_factory=dict)  # slot -> its Kafka proxy's port
    server: ToxiproxyServer = field(default_factory=ToxiproxyServer)
    links: dict[str, Link] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.dialled = {slot: free_port() for slot in self.slots}

    def listeners(self) -> dict[str, int]:
        """The broker listeners to configure (``KafkaBroker(proxied=...)``), before it starts."""
        return {_listener(slot): port for slot, port in self.dialled.items()}

    def start(self, broker: KafkaBroker, redis_port: int) -> Links:
        """The server and every slot's two proxies (the broker's ports reserved)."""
        broker.reserve_ports()
        self.server.start()
        for slot in self.slots:
            kafka_up = f"127.0.0.1:{broker.proxied_ports[_listener(slot)]}"
            self.links[slot] = Link(
                slot,
                redis=self.server.proxy(f"{slot}-redis", f"127.0.0.1:{redis_port}"),
                kafka=self.server.proxy(f"{slot}-kafka", kafka_up, listen=self.dialled[slot]),
            )
        return self

    def stop(self) -> None:
        self.server.stop()

    def __getitem__(self, slot: str) -> Link:
        return self.links[slot]

    def env(self, slot: str, redis_url: str) -> dict[str, str]:
        """A slot's addresses of the broker and Redis (its proxies)."""
        link = self.links[slot]
        parts = urlsplit(redis_url)
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@127.0.0.1:{link.redis.listen}" if auth else f"127.0.0.1:{link.redis.listen}"
        return {
            "MW_BOOTSTRAP": f"127.0.0.1:{link.kafka.listen}",
            "MW_REDIS_URL": urlunsplit(parts._replace(netloc=netloc)),
        }


def _listener(slot: str) -> str:
    return f"PROXY_{slot.upper()}"
