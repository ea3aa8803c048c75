"""An in-memory checkpoint store with the Redis store's contract, for fast unit tests.

It keeps the same promises (unique tokens, fencing, all-or-nothing commits) within
one process; it proves nothing about Redis, which the contract tests check against
a real server. Every call holds one lock: a worker's commit runs on a thread of its
own (overlapping commits) beside the loop's reads.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from mwcore.api.record import Production
from mwcore.errors import FencedError
from mwcore.store.checkpoint import Checkpoint, Snapshot
from mwcore.store.checkpoint_wire import decode_entry
from mwcore.store.interface import IntervalId
from mwcore.watermarks.report_format import decode_segments


@dataclass
class _Interval:
    token: str = ""
    grants: int = 0
    state: dict[bytes, bytes] = field(default_factory=dict)
    timers: dict[bytes, bytes] = field(default_factory=dict)
    pending: dict[bytes, list[Production]] = field(default_factory=dict)
    seen: dict[bytes, int] = field(default_factory=dict)
    seen_by_ts: list[tuple[int, bytes]] = field(default_factory=list)  # a heap: the GC's order
    positions: dict[str, int] = field(default_factory=dict)
    segments: dict[bytes, bytes] = field(default_factory=dict)
    commits: int = 0
    last_commit_id: bytes = b""


class MemoryCheckpointStore:
    def __init__(self) -> None:
        self._intervals: dict[IntervalId, _Interval] = {}
        self._epoch = os.urandom(8).hex()
        self._lock = threading.RLock()

    def _get(self, interval: IntervalId) -> _Interval:
        return self._intervals.setdefault(interval, _Interval())

    def grant(self, interval: IntervalId, owner: str) -> str:
        with self._lock:
            iv = self._get(interval)
            iv.grants += 1
            iv.token = f"{self._epoch}:{iv.grants}:{os.urandom(8).hex()}"
            return iv.token

    def release(self, interval: IntervalId, token: str) -> bool:
        with self._lock:
            return self._get(interval).token == token

    def recover(self, interval: IntervalId, token: str) -> Snapshot:
        with self._lock:
            iv = self._get(interval)
            return Snapshot(
                token=token,
                positions=dict(iv.positions),
                timers=[decode_entry(f, v) for f, v in iv.timers.items()],
                pending={k: list(v) for k, v in iv.pending.items()},
                seen=list(iv.seen),
                segments={k: decode_segments(v) for k, v in iv.segments.items()},
                commits=iv.commits,
            )

    def load_state(self, interval: IntervalId, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            state = self._get(interval).state
            return [state.get(k) for k in keys]

    def whole_state(self, interval: IntervalId, max_keys: int, max_bytes: int) -> dict[bytes, bytes] | None:
        with self._lock:
            state = self._get(interval).state
            if len(state) > max_keys or sum(len(k) + len(v) for k, v in state.items()) > max_bytes:
                return None
            return dict(state)

    def seen(self, interval: IntervalId, record_ids: Sequence[bytes]) -> list[bool]:
        with self._lock:
            seen = self._get(interval).seen
            return [rid in seen for rid in record_ids]

    def seen_ids(self, interval: IntervalId) -> list[bytes]:
        with self._lock:
            return list(self._get(interval).seen)

    def commit_many(self, commits: Sequence[tuple[IntervalId, str, Checkpoint]]) -> list[int | FencedError]:
        with self._lock:
            results: list[int | FencedError] = []
            for interval, token, checkpoint in commits:
                try:
                    results.append(self.commit(interval, token, checkpoint))
                except FencedError as exc:
                    results.append(exc)
            return results

    def commit(self, interval: IntervalId, token: str, checkpoint: Checkpoint) -> int:
        with self._lock:
            iv = self._get(interval)
            if token != iv.token:
                raise FencedError(str(interval), token)
            if checkpoint.commit_id and checkpoint.commit_id == iv.last_commit_id:
                return iv.commits  # a retry of a commit already applied
            iv.last_commit_id = checkpoint.commit_id
            for k, v in checkpoint.state.items():
                if v is None:
                    iv.state.pop(k, None)
                else:
                    iv.state[k] = v
            for f, tv in checkpoint.timers.items():
                if tv is None:
                    iv.timers.pop(f, None)
                else:
                    iv.timers[f] = tv
            iv.pending.update({k: list(v) for k, v in checkpoint.pending.items()})
            for key in checkpoint.acked:
                iv.pending.pop(key, None)
            iv.seen.update(checkpoint.seen)
            for rid, ts in checkpoint.seen.items():
                heapq.heappush(iv.seen_by_ts, (ts, rid))
            if checkpoint.seen_gc_below is not None:
                below, heap = checkpoint.seen_gc_below, iv.seen_by_ts
                while heap and heap[0][0] < below:  # each id once, however many commits
                    ts, rid = heapq.heappop(heap)
                    if iv.seen.get(rid) == ts:
                        del iv.seen[rid]
            iv.positions.update(checkpoint.positions)
            for k, raw in checkpoint.segments.items():
                if raw is None:
                    iv.segments.pop(k, None)
                else:
                    iv.segments[k] = raw
            iv.commits += 1
            return iv.commits
