"""One contract, two checkpoint stores: the in-memory one and Redis (a real server)."""

from __future__ import annotations

import json

import pytest
import redis

from mwcore.api.record import Production, TimeDomain
from mwcore.cores import core
from mwcore.cores.native import installed
from mwcore.errors import FencedError
from mwcore.store.checkpoint import Checkpoint, TimerEntry
from mwcore.store.checkpoint_wire import encode_entry, field_of
from mwcore.store.interface import CheckpointStore, IntervalId
from mwcore.store.memory_store import MemoryCheckpointStore
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.store.scripts import SEEN_BUCKET_MS
from mwcore.tools.stack.localstack import RedisServer

IV = IntervalId("contract", "comp", 0)


@pytest.fixture(params=["memory", "redis", "redis-native", "redis-buckets", "redis-native-buckets"])
def store(request: pytest.FixtureRequest, redis_server: RedisServer) -> CheckpointStore:
    """The in-memory twin, and the Redis store with each core's packing of commits
    (``native``: the native core's, skipped only where it is not built), seen ids in
    the sorted set or (``buckets``, ``MW_SEEN_BUCKETS``) in buckets."""
    param = str(request.param)
    if param == "memory":
        return MemoryCheckpointStore()
    if "native" in param and not installed():
        pytest.skip("the native core is not built (make bootstrap builds it where cargo is)")
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    packer = core("native" if "native" in param else "python").packer()
    return RedisCheckpointStore(client, packer=packer, seen_buckets="buckets" in param)


def _full_checkpoint() -> Checkpoint:
    timer = TimerEntry("k", "t", 5, TimeDomain.EVENT, b"s" * 16)
    prod = Production(b"p" * 16, "out", b"k", b"v", 5, (("h", b"x"),))
    return Checkpoint(
        state={b"k": b"1", b"gone": None},
        timers={field_of("k", "t"): encode_entry(timer)},
        pending={b"b" * 16: [prod]},
        seen={b"i" * 16: 5},
        positions={"in:0": 7},
    )


def test_commit_then_recover_round_trips(store: CheckpointStore) -> None:
    token = store.grant(IV, "a")
    assert store.commit(IV, token, _full_checkpoint()) == 1
    snap = store.recover(IV, store.grant(IV, "b"))
    assert snap.positions == {"in:0": 7}
    assert [(t.key, t.tag, t.timestamp) for t in snap.timers] == [("k", "t", 5)]
    assert snap.pending == {b"b" * 16: [Production(b"p" * 16, "out", b"k", b"v", 5, (("h", b"x"),))]}
    assert snap.seen == [b"i" * 16] and snap.commits == 1
    assert store.load_state(IV, [b"k", b"gone"]) == [b"1", None]
    assert store.seen(IV, [b"i" * 16, b"j" * 16]) == [True, False]
    assert store.seen_ids(IV) == [b"i" * 16]


def test_the_whole_state_is_read_when_it_fits(store: CheckpointStore) -> None:
    token = store.grant(IV, "a")
    assert store.whole_state(IV, 10, 1 << 20) == {}
    state = {f"key-{n}".encode(): str(n).encode() * 50 for n in range(2_500)}
    store.commit(IV, token, Checkpoint(state=dict(state)))
    store.commit(IV, token, Checkpoint(state={b"key-7": None}))
    del state[b"key-7"]
    size = sum(len(k) + len(v) for k, v in state.items())
    assert store.whole_state(IV, len(state), size) == state
    assert store.whole_state(IV, len(state) - 1, size) is None  # more keys than asked
    assert store.whole_state(IV, len(state), size - 1) is None  # more bytes


def test_a_new_grant_fences_the_old_token_and_nothing_is_written(store: CheckpointStore) -> None:
    old = store.grant(IV, "a")
    new = store.grant(IV, "b")
    assert old != new
    with pytest.raises(FencedError):
        store.commit(IV, old, _full_checkpoint())
    assert store.load_state(IV, [b"k"]) == [None]
    assert store.recover(IV, new).positions == {}


def test_acked_batches_are_deleted_and_state_cleared(store: CheckpointStore) -> None:
    token = store.grant(IV, "a")
    store.commit(IV, token, _full_checkpoint())
    store.commit(
        IV, token, Checkpoint(acked=[b"b" * 16], state={b"k": None}, timers={field_of("k", "t"): None})
    )
    snap = store.recover(IV, token)
    assert snap.pending == {} and snap.timers == []
    assert store.load_state(IV, [b"k"]) == [None]


def test_a_retried_commit_is_applied_once(store: CheckpointStore) -> None:
    token = store.grant(IV, "a")
    cp = _full_checkpoint()
    cp.commit_id = b"c" * 16
    assert store.commit(IV, token, cp) == 1
    assert store.commit(IV, token, cp) == 1  # the reply was lost; the worker retries
    nxt = Checkpoint(positions={"in:0": 9}, commit_id=b"d" * 16)
    assert store.commit(IV, token, nxt) == 2


def test_seen_ids_are_forgotten_below_the_gc_timestamp(store: CheckpointStore) -> None:
    """Every id whose whole bucket (``SEEN_BUCKET_MS`` of event time) is below the GC
    timestamp is forgotten; none at or above it."""
    token = store.grant(IV, "a")
    ids_by_ts = {bytes([i]) * 16: i * SEEN_BUCKET_MS for i in range(1, 11)}
    store.commit(IV, token, Checkpoint(seen=dict(ids_by_ts)))
    below = 5 * SEEN_BUCKET_MS
    store.commit(IV, token, Checkpoint(positions={"in:0": 1}, seen_gc_below=below))
    assert sorted(store.seen_ids(IV)) == sorted(rid for rid, ts in ids_by_ts.items() if ts >= below)
    assert store.seen(IV, [bytes([4]) * 16, bytes([5]) * 16]) == [False, True]
    with pytest.raises(FencedError):  # fenced like every other write
        store.commit(IV, "stale", Checkpoint(positions={"in:0": 2}, seen_gc_below=100 * SEEN_BUCKET_MS))
    assert len(store.seen_ids(IV)) == 6


def _redis_store(redis_server: RedisServer, *, seen_buckets: bool) -> RedisCheckpointStore:
    return RedisCheckpointStore(redis.Redis(port=redis_server.port), seen_buckets=seen_buckets)


def test_an_id_below_the_gc_timestamp_stays_while_its_bucket_is_partly_above(
    redis_server: RedisServer,
) -> None:
    redis.Redis(port=redis_server.port).flushall()
    store = _redis_store(redis_server, seen_buckets=True)
    token = store.grant(IV, "a")
    early, late = b"e" * 16, b"l" * 16
    store.commit(IV, token, Checkpoint(seen={early: 3 * SEEN_BUCKET_MS, late: 3 * SEEN_BUCKET_MS + 900}))
    keys = {k.decode().rsplit(":", 2)[-2:][-1] for k in redis.Redis(port=redis_server.port).keys("*seen*")}
    assert keys == {"3", "b"}, keys  # one bucket and the index, no sorted set
    store.commit(IV, token, Checkpoint(positions={"in:0": 1}, seen_gc_below=3 * SEEN_BUCKET_MS + 500))
    assert store.seen(IV, [early, late]) == [True, True]  # kept longer: safe
    store.commit(IV, token, Checkpoint(positions={"in:0": 2}, seen_gc_below=4 * SEEN_BUCKET_MS))
    assert store.seen(IV, [early, late]) == [False, False] and store.seen_ids(IV) == []
    assert redis.Redis(port=redis_server.port).keys("*seen*") == []  # no empty bucket or index left


@pytest.mark.parametrize("first", [False, True], ids=["sorted-set-then-buckets", "buckets-then-sorted-set"])
def test_seen_ids_written_either_way_are_found_and_forgotten_either_way(
    redis_server: RedisServer, first: bool
) -> None:
    """``MW_SEEN_BUCKETS`` turned on (or off) in a rolling deploy: what workers wrote
    the other way still counts as seen, is recovered, and is collected."""
    redis.Redis(port=redis_server.port).flushall()
    before, after = (
        _redis_store(redis_server, seen_buckets=first),
        _redis_store(redis_server, seen_buckets=not first),
    )
    old, new, never = b"o" * 16, b"n" * 16, b"x" * 16
    before.commit(IV, before.grant(IV, "a"), Checkpoint(seen={old: 1 * SEEN_BUCKET_MS}))
    token = after.grant(IV, "b")
    after.commit(IV, token, Checkpoint(seen={new: 2 * SEEN_BUCKET_MS}))
    for store in (before, after):
        assert store.seen(IV, [old, new, never]) == [True, True, False]
        assert sorted(store.recover(IV, token).seen) == sorted([old, new])
    after.commit(IV, token, Checkpoint(positions={"in:0": 1}, seen_gc_below=2 * SEEN_BUCKET_MS))
    assert after.seen(IV, [old, new]) == [False, True]
    after.commit(IV, token, Checkpoint(positions={"in:0": 2}, seen_gc_below=3 * SEEN_BUCKET_MS))
    assert before.seen_ids(IV) == [] and after.seen_ids(IV) == []


def test_grants_are_written_to_the_report_stream_in_order(redis_server: RedisServer) -> None:
    client = redis.Redis(port=redis_server.port)
    client.flushall()
    store = RedisCheckpointStore(client)
    first, second = store.grant(IV, "a"), store.grant(IV, "b")
    entries = client.xrange(f"mw:{IV.tag()}:wmr")
    assert [json.loads(f[b"r"]) for _, f in entries] == [
        {"k": "grant", "i": 0, "t": first},
        {"k": "grant", "i": 0, "t": second},
    ]
