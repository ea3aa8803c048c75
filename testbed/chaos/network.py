"""The network fault kinds (``bench/chaos.py --network``), each on one process's own link
(``links.py``), each healing by itself:

- ``partition_redis``: a worker cut off from Redis, not from the broker, for 1-10 s,
  one of two ways (drawn): ``cut``, its proxy disabled (connections closed, new ones
  refused: a host gone, a firewall's REJECT), or ``drop``, whatever it sends or is
  sent held while its connections stay up and delivered when the link heals (a
  firewall's DROP or a pulled cable: TCP sends it again once it gets through), so a
  write it sent during the partition lands after the heal, maybe after another
  worker took its intervals over;
- ``partition_broker``: a worker cut off from the broker (``cut`` or ``drop``), not
  from Redis, for 1-10 s (its session runs out; another worker takes its intervals over while it still
  reaches Redis: a zombie the tokens must fence);
- ``slow_link``: 100-1,000 ms more latency with jitter on what a worker sends to
  Redis or to the broker, for 5-20 s (its writes land late, maybe after its intervals
  moved on);
- ``reset_peer``: for 1-3 s every connection of a worker's Redis or broker link is
  reset (TCP RST) 0-500 ms after it carries data;
- ``half_open``: data on a worker's Redis or broker link is dropped while its
  connections stay up (no FIN, no RST), both ways or the replies only (a request lands,
  its answer is lost), for 2-10 s;
- ``bandwidth``: a worker's Redis or broker link throttled to 4-32 KB/s both ways, for
  5-20 s;
- ``authority_partition``: the watermark authority cut off from Redis or the broker
  (``cut`` or ``drop``) for 1-10 s.

``seconds`` (``--fault-seconds``) replaces every kind's range of durations (the short
runs of the tests); ``partition`` (``--partition``) the draw of ``cut`` or ``drop``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from testbed.chaos.links import Links
from testbed.toxiproxy import Proxy

NETWORK_KINDS = (
    "partition_redis",
    "partition_broker",
    "slow_link",
    "reset_peer",
    "half_open",
    "bandwidth",
    "authority_partition",
)


HELD_MS = 3_600_000  # drop: what a latency toxic holds is delivered when it is removed


@dataclass
class Played:
    target: str  # e.g. "w1:redis latency 640±120 ms for 7.3 s"
    began: float  # monotonic
    healed: float  # monotonic


def play(
    kind: str,
    rng: random.Random,
    links: Links,
    workers: Sequence[str],
    seconds: tuple[float, float] | None = None,
    partition: str = "either",
    sleep: Callable[[float], None] = time.sleep,
) -> Played:
    """Inflict ``kind`` on one link, wait while it lasts, heal it."""

    def lasting(lo: float, hi: float) -> float:
        return rng.uniform(*(seconds or (lo, hi)))

    slot = "authority" if kind == "authority_partition" else rng.choice(list(workers))
    if kind in ("partition_redis", "partition_broker"):
        which = "redis" if kind == "partition_redis" else "kafka"
    else:
        which = rng.choice(("redis", "kafka"))
    proxy = links[slot].of(which)
    began = time.monotonic()
    if kind in ("partition_redis", "partition_broker", "authority_partition"):
        duration = lasting(1, 10)
        what = rng.choice(("cut", "drop")) if partition == "either" else partition
        if what == "cut":
            proxy.enable(False)
            undo: Callable[[], None] = proxy.enable
        else:
            undo = _toxic(proxy, "latency", ("upstream", "downstream"), latency=HELD_MS, jitter=0)
    elif kind == "slow_link":
        latency = rng.randint(100, 1000)
        jitter = rng.randint(0, latency // 2)
        duration = lasting(5, 20)
        what = f"latency {latency}±{jitter} ms"
        undo = _toxic(proxy, "latency", ("upstream",), latency=latency, jitter=jitter)
    elif kind == "reset_peer":
        after = rng.randint(0, 500)
        duration = lasting(1, 3)
        what = f"reset after {after} ms"
        undo = _toxic(proxy, "reset_peer", ("downstream",), timeout=after)
    elif kind == "half_open":
        streams: tuple[str, ...] = rng.choice((("upstream", "downstream"), ("downstream",)))
        duration = lasting(2, 10)
        what = "silent" if len(streams) == 2 else "replies lost"
        undo = _toxic(proxy, "timeout", streams, timeout=0)
    elif kind == "bandwidth":
        rate = rng.randint(4, 32)
        duration = lasting(5, 20)
        what = f"{rate} KB/s"
        undo = _toxic(proxy, "bandwidth", ("upstream", "downstream"), rate=rate)
    else:
        raise ValueError(f"not a network fault kind: {kind}")
    try:
        sleep(duration)
    finally:
        undo()
    return Played(f"{slot}:{which} {what} for {duration:.1f} s", began, time.monotonic())


def _toxic(proxy: Proxy, kind: str, streams: tuple[str, ...], **attributes: int) -> Callable[[], None]:
    names = [f"{kind}-{stream}" for stream in streams]
    for name, stream in zip(names, streams, strict=True):
        proxy.add(name, kind, stream, **attributes)  # type: ignore[arg-type]

    def undo() -> None:
        for name in names:
            proxy.remove(name)

    return undo
