"""Packing one checkpoint's commit command: hiredis against the hand-written packer it
replaced, in one process, alternating.

Run: ``.venv/bin/python bench/packing.py [--records 5000] [--rounds 9]``; prints one
line per round and variant, JSON last.

The checkpoint has the shape of a 5,000-record batch of ``bench/hotpath.py``'s keyed
count: 1,350 state sets (keys ``query-N``, values a few digits), 5,000 seen ids (16
random bytes, millisecond timestamps), one 307,000-byte pending batch, one input
position and a seen-GC floor (``--records`` scales it). The cycle collector is tuned
as in a worker (``--gc-threshold``). Timed per checkpoint:

- ``old``: the arguments with the seen section pre-packed as one blob, then the
  hand-written packer (both as at commit 922e7cf, copied below);
- ``hiredis``: the store's ``commit_args`` (seen ids as plain arguments), then
  ``fast_script.pack_call`` (``hiredis.pack_command``);
- ``native``: ``mwcore_native.pack_commit`` (``MW_CORE=native``'s packing, straight
  from the checkpoint), where the native core is built;

and apart: building the arguments (old / new), and packing the same flat arguments
(hand-written / hiredis), per argument. Both variants must give identical bytes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.core import native
from mwcore.errors import ConfigError
from mwcore.runtime.runner import tune_gc
from mwcore.store import scripts
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.checkpoint_wire import encode_batch
from mwcore.store.fast_script import FastScript, pack_call
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore, _sets_and_deletes, commit_args

# --- The code this replaced (store/resp.py and redis_store.py at 922e7cf), to measure against.


class PackedArgs(NamedTuple):
    data: bytes
    n_args: int


def old_pack_command(args: Sequence[Any]) -> bytes:
    count = len(args)
    out = [b""]
    append = out.append
    for a in args:
        if a.__class__ is not bytes:
            if isinstance(a, PackedArgs):
                append(a.data)
                count += a.n_args - 1
                continue
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = b"%d" % a
        append(b"$%d\r\n%b\r\n" % (len(a), a))
    out[0] = b"*%d\r\n" % count
    return b"".join(out)


def old_packed_seen(seen: dict[bytes, int]) -> PackedArgs:
    fmt = b"$%d\r\n%b\r\n$%d\r\n%b\r\n"
    parts = []
    for rid, ts in seen.items():
        t = b"%d" % ts
        parts.append(fmt % (len(t), t, len(rid), rid))
    return PackedArgs(b"".join(parts), 2 * len(seen))


def old_commit_args(token: str, cp: Checkpoint) -> list[Any]:
    args: list[Any] = [token, "1", cp.commit_id]
    _sets_and_deletes(args, cp.state)
    _sets_and_deletes(args, cp.timers)
    args.append(len(cp.pending))
    for key, productions in cp.pending.items():
        args += (key, encode_batch(productions))
    args.append(len(cp.acked))
    args += cp.acked
    args.append(len(cp.seen))
    if cp.seen:
        args.append(old_packed_seen(cp.seen))
    args.append(len(cp.positions))
    for pos_field, off in cp.positions.items():
        args += (pos_field, off)
    if cp.seen_gc_below is None:
        args.append(0)
    else:
        args += (1, cp.seen_gc_below)
    _sets_and_deletes(args, cp.segments)
    return args


# ---


def checkpoint(records: int, rng: random.Random) -> Checkpoint:
    """Shaped like a batch of bench/hotpath.py. Its pending batch (307,000 bytes for
    5,000 records) rides as an encoded segment: encode_batch is the same in both
    variants, and only the packing is timed."""
    now = 1_767_000_000_000
    return Checkpoint(
        state={
            f"query-{i}".encode(): str(rng.randrange(1, 1000)).encode() for i in range(records * 27 // 100)
        },
        seen={rng.randbytes(16): now + i for i in range(records)},
        positions={"events:0": 10 * records},
        commit_id=rng.randbytes(16),
        seen_gc_below=now - 60_000,
        segments={rng.randbytes(16): rng.randbytes(records * 614 // 10)},
    )


def per_call_ns(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(number):
        fn()
    return (time.perf_counter_ns() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--number", type=int, default=50, help="checkpoints packed per timing")
    parser.add_argument("--gc-threshold", type=int, default=50_000, help="as MW_GC_THRESHOLD (0: Python's)")
    args = parser.parse_args()
    rng = random.Random(1)
    cp = checkpoint(args.records, rng)
    store = RedisCheckpointStore(redis.Redis())  # never connects: only packs
    sha = FastScript(store.client, scripts.COMMIT).sha
    keys = store.keys(IntervalId("bench", "count", 0)).commit_keys()
    token = "0123456789abcdef:1"

    def old() -> bytes:
        return old_pack_command(["EVALSHA", sha, len(keys), *keys, *old_commit_args(token, cp)])

    def new() -> bytes:
        return pack_call(sha, keys, commit_args(token, True, cp))

    flat_args = commit_args(token, True, cp)
    flat: list[Any] = ["EVALSHA", sha, len(keys), *keys, *flat_args]
    assert old() == new() == old_pack_command(flat), "the two packings differ"
    try:
        pack_native = native().pack_commit
    except ConfigError:
        pack_native = None  # the native core is not built here
    if pack_native is not None:
        assert pack_native(sha, keys, token, True, cp.commit_id, cp) == new(), "the native packing differs"
    n_args = len(flat)
    tune_gc(args.gc_threshold)
    variants: dict[str, Callable[[], object]] = {
        "old": old,
        "hiredis": new,
        "args_old": lambda: old_commit_args(token, cp),
        "args_new": lambda: commit_args(token, True, cp),
        "pack_flat_old": lambda: old_pack_command(flat),
        "pack_flat_hiredis": lambda: pack_call(sha, keys, flat_args),
    }
    if pack_native is not None:
        variants["native"] = lambda: pack_native(sha, keys, token, True, cp.commit_id, cp)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.rounds):
        for name, fn in variants.items():
            ns = per_call_ns(fn, args.number)
            times[name].append(ns)
            print(
                json.dumps({"round": r, "variant": name, "us_per_checkpoint": round(ns / 1000, 1)}),
                flush=True,
            )
    result: dict[str, Any] = {"records": args.records, "args": n_args, "bytes": len(new())}
    for name, runs in times.items():
        result[name] = {
            "median_us": round(statistics.median(runs) / 1000, 1),
            "min_us": round(min(runs) / 1000, 1),
            "median_ns_per_arg": round(statistics.median(runs) / n_args, 1),
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
