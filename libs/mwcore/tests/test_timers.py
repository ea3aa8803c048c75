from __future__ import annotations

from mwcore.api.record import TimeDomain
from mwcore.runtime.timers import TimerQueue
from mwcore.store.checkpoint import TimerEntry
from mwcore.store.checkpoint_wire import decode_entry, encode_entry, field_of


def entry(key: str, tag: str, ts: int, domain: TimeDomain = TimeDomain.EVENT) -> TimerEntry:
    return TimerEntry(key, tag, ts, domain, f"{key}{tag}{ts}".encode().ljust(16, b"."))


def test_due_in_timestamp_order_and_only_below_limit() -> None:
    q = TimerQueue()
    for key, ts in [("a", 30), ("b", 10), ("a", 20), ("c", 40)]:
        q.set(entry(key, f"t{ts}", ts))
    fired = [(e.key, e.timestamp) for e in q.due(TimeDomain.EVENT, 31)]
    assert fired == [("b", 10), ("a", 20), ("a", 30)]
    assert len(q) == 1
    assert q.oldest(TimeDomain.EVENT) == 40


def test_resetting_a_tag_replaces_it() -> None:
    q = TimerQueue()
    q.set(entry("a", "flush", 10))
    q.set(entry("a", "flush", 50))
    assert [e.timestamp for e in q.due(TimeDomain.EVENT, 100)] == [50]


def test_cleared_timers_never_fire_and_domains_are_separate() -> None:
    q = TimerQueue()
    q.set(entry("a", "x", 10))
    q.set(entry("a", "w", 5, TimeDomain.WALL))
    assert q.clear("a", "x") is not None
    assert list(q.due(TimeDomain.EVENT, 100)) == []
    assert [e.tag for e in q.due(TimeDomain.WALL, 100)] == ["w"]


def test_encoding_round_trips() -> None:
    e = entry("k\u00e9y", "tag", -5, TimeDomain.WALL)
    assert decode_entry(field_of(e.key, e.tag), encode_entry(e)) == e


def test_a_timer_moved_to_another_domain_fires_only_there() -> None:
    """Set again in another domain at the same time by the same call (same set id): the
    old domain's heap still holds it, and must not take it by the old domain's clock."""
    q = TimerQueue()
    q.set(entry("a", "x", 10, TimeDomain.EVENT))
    q.set(entry("a", "x", 10, TimeDomain.WALL))
    assert q.oldest(TimeDomain.EVENT) is None
    assert list(q.due(TimeDomain.EVENT, 100)) == []
    assert [e.domain for e in q.due(TimeDomain.WALL, 100)] == [TimeDomain.WALL]
