"""The commit command as hiredis packs it, and the script caller against a real Redis."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import redis

from mwcore.store.checkpoint import Checkpoint
from mwcore.store.checkpoint_wire import commit_args, encode_batch
from mwcore.store.fast_script import Arg, FastScript, pack_call
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore

IV = IntervalId("fast", "comp", 0)
ODD_ID = b"\r\n$3\r\n\x00\xff" + b"i" * 8  # RESP framing and non-UTF-8 bytes inside an id


def resp(args: Sequence[Arg]) -> bytes:
    """RESP as the protocol defines it: an array of bulk strings, ints in decimal."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a.encode() if isinstance(a, str) else b"%d" % a if isinstance(a, int) else a
        out += b"$%d\r\n%b\r\n" % (len(b), b)
    return out


def test_a_checkpoint_packs_as_its_sections_in_order() -> None:
    cp = Checkpoint(
        state={b"k": b"v", b"gone": None},
        timers={b"t": None},
        acked=[b"a" * 16],
        seen={b"i" * 16: 5, ODD_ID: -3, b"j" * 16: 2**62},
        positions={"in:0": 7},
        commit_id=b"c" * 16,
        seen_gc_below=1_767_000_000_000,
        segments={b"s" * 16: b"seg"},
    )
    args = commit_args("tok", True, cp)
    expected: list[Arg] = [
        "tok", "1", b"c" * 16,
        1, b"k", b"v", 1, b"gone",   # state: sets, deletes
        0, 1, b"t",                  # timers
        0,                           # pending
        1, b"a" * 16,                # acked
        3, 5, b"i" * 16, -3, ODD_ID, 2**62, b"j" * 16,  # seen: (timestamp, id) pairs
        1, "in:0", 7,                # positions
        1, 1_767_000_000_000,        # seen GC floor
        1, b"s" * 16, b"seg", 0,     # segments
    ]  # fmt: skip
    assert args == expected
    keys = RedisCheckpointStore(redis.Redis()).keys(IV).commit_keys()  # packing only: never connects
    sha = "0" * 40
    assert pack_call(sha, keys, args) == resp(["EVALSHA", sha, len(keys), *keys, *expected])


def test_pack_call_takes_exact_ints_only() -> None:
    with pytest.raises(TypeError):
        pack_call("0" * 40, [], [True])


def test_a_large_checkpoint_commits_and_recovers(client: redis.Redis) -> None:
    store = RedisCheckpointStore(client)
    token = store.grant(IV, "a")
    seen = {i.to_bytes(16, "big"): 1_767_000_000_000 + i for i in range(20_000)}
    seen[ODD_ID] = 1
    cp = Checkpoint(
        state={f"k{i}".encode(): b"%d" % i for i in range(3_000)},
        pending={b"p" * 16: []},
        seen=seen,
        positions={"in:0": 20_001},
    )
    assert store.commit(IV, token, cp) == 1
    snap = store.recover(IV, store.grant(IV, "b"))
    assert sorted(snap.seen) == sorted(seen)
    assert client.zscore(store.keys(IV).seen, ODD_ID) == 1
    assert snap.positions == {"in:0": 20_001} and snap.pending == {b"p" * 16: []}
    assert client.hget(store.keys(IV).pending, b"p" * 16) == encode_batch([])
    assert store.load_state(IV, [b"k0", b"k2999"]) == [b"0", b"2999"]


ECHO = "if ARGV[1] == 'fail' then return redis.error_reply('BOOM') end return ARGV[1]"


def test_calls_reply_in_order_with_errors_in_place(client: redis.Redis) -> None:
    script = FastScript(client, ECHO)
    replies = script.call_many([([], ["a"]), ([], ["fail"]), ([], [b"\x00\r\n"])])
    assert replies[0] == b"a" and replies[2] == b"\x00\r\n"
    assert isinstance(replies[1], redis.ResponseError) and str(replies[1]) == "BOOM"
    with pytest.raises(redis.ResponseError, match="BOOM"):
        script([], ["fail"])


def test_a_flushed_script_is_loaded_and_only_its_calls_retried(client: redis.Redis) -> None:
    script = FastScript(client, "return redis.call('INCR', KEYS[1])")
    assert script(["n"], []) == 1
    client.script_flush()
    assert script.call_many([(["n"], []), (["n"], [])]) == [2, 3]  # each applied once
    assert client.script_exists(script.sha) == [True]


def test_a_lost_connection_is_raised_then_reopened(client: redis.Redis) -> None:
    script = FastScript(client, ECHO)
    assert script([], ["x"]) == b"x"
    client.client_kill_filter(_type="normal", skipme=True)  # the script's own connection
    with pytest.raises(redis.ConnectionError):
        script([], ["y"])
    assert script([], ["z"]) == b"z"
