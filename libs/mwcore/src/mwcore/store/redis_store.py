"""The Redis checkpoint store (see scripts.py for the two scripts it runs)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any, Literal, cast

import redis
from redis.backoff import ExponentialBackoff

from mwcore.api.record import Production
from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import CheckpointError, FencedError
from mwcore.store import scripts
from mwcore.store.checkpoint import Checkpoint, Snapshot
from mwcore.store.checkpoint_wire import CommitPacker, decode_batch, decode_entry, reference_packer
from mwcore.store.client import REDIS_RETRIES, RedisClient, execute, redis_client
from mwcore.store.fast_script import Arg, Call, FastScript
from mwcore.store.interface import IntervalId
from mwcore.watermarks.report_format import STREAM_MAXLEN, decode_segments, report_stream

TokenScheme = Literal["safe", "counter-only"]


class IntervalKeys:
    __slots__ = (
        "grants",
        "meta",
        "pending",
        "positions",
        "seen",
        "seen_index",
        "segments",
        "state",
        "timers",
        "token",
    )

    def __init__(self, interval: IntervalId, prefix: str = "mw") -> None:
        base = f"{prefix}:{interval.tag()}"
        self.token = f"{base}:token"
        self.grants = f"{base}:grants"
        self.state = f"{base}:state"
        self.timers = f"{base}:timers"
        self.pending = f"{base}:pending"
        self.seen = f"{base}:seen"  # a sorted set; and "<seen>:<bucket>": sets (buckets)
        self.seen_index = f"{base}:seen:b"  # the buckets' numbers (scripts.COMMIT)
        self.positions = f"{base}:pos"
        self.meta = f"{base}:meta"
        self.segments = f"{base}:segs"

    def commit_keys(self, seen_buckets: bool = False) -> list[str]:
        """The commit script's keys (``seen_buckets``: with the bucket index, so the
        seen ids go to buckets)."""
        keys = [
            self.token,
            self.state,
            self.timers,
            self.pending,
            self.seen,
            self.positions,
            self.meta,
            self.segments,
        ]
        return [*keys, self.seen_index] if seen_buckets else keys


class RedisCheckpointStore:
    """Checkpoints in Redis, one hash tag per interval.

    ``controls`` (``disable_fencing``, ``counter_tokens``, ``recover_without_headers``)
    exist only so the tests' negative controls can show what goes wrong without fencing,
    random tokens and the headers of pending productions.
    """

    def __init__(
        self,
        client: RedisClient,
        *,
        controls: NegativeControls = SAFE,
        retries: int = 5,
        replicas: int = 0,
        wait_ms: int = 5_000,
        packer: CommitPacker = reference_packer,  # the core's (mwcore/cores)
        seen_buckets: bool = False,  # MW_SEEN_BUCKETS: new seen ids into buckets (scripts.COMMIT)
    ) -> None:
        self._r = client
        self._seen_buckets = seen_buckets
        self._pack = packer
        self._fencing = not controls.disable_fencing
        self._scheme: TokenScheme = "counter-only" if controls.counter_tokens else "safe"
        self._headless = controls.recover_without_headers
        self._retries = retries
        # replicas: each checkpoint counts as committed only once that many replicas of
        # its primary acknowledged it (WAIT): a failover then cannot lose it. A grant
        # waits too: replication is in order, so a new owner never starts from a
        # checkpoint (its predecessor's last, maybe not acknowledged) a failover can lose.
        self._grant = FastScript(client, scripts.GRANT, replicas=replicas, wait_ms=wait_ms)
        self._commit = FastScript(client, scripts.COMMIT, replicas=replicas, wait_ms=wait_ms)
        self._fenced_set = client.register_script(scripts.FENCED_SET)
        self._release = client.register_script(scripts.RELEASE)
        self._seen = client.register_script(scripts.SEEN)
        self._keys: dict[IntervalId, IntervalKeys] = {}

    @classmethod
    def from_url(cls, url: str, **kwargs: object) -> RedisCheckpointStore:
        return cls(redis_client(url), **kwargs)  # type: ignore[arg-type]

    @property
    def client(self) -> RedisClient:
        return self._r

    def keys(self, interval: IntervalId) -> IntervalKeys:
        k = self._keys.get(interval)
        if k is None:
            k = self._keys[interval] = IntervalKeys(interval)
        return k

    def grant(self, interval: IntervalId, owner: str) -> str:
        k = self.keys(interval)
        nonce = os.urandom(8).hex()
        stream = report_stream(interval.namespace, interval.computation, interval.index)
        keys: list[Arg] = [k.token, k.grants, k.meta, stream]
        args: list[Arg] = [nonce, owner, self._scheme, interval.index, STREAM_MAXLEN]
        backoff = ExponentialBackoff(cap=1.0, base=0.05)
        for attempt in range(REDIS_RETRIES + 1):
            try:
                raw = self._grant(keys, args)
                break
            except (redis.ConnectionError, redis.TimeoutError):
                # A Redis restart of a few seconds (as the client's own retries ride
                # out): a grant repeated after a lost reply only makes another token.
                if attempt == REDIS_RETRIES:
                    raise
                time.sleep(backoff.compute(attempt + 1))
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    def recover(self, interval: IntervalId, token: str) -> Snapshot:
        k = self.keys(interval)

        def build(pipe: Any) -> None:
            pipe.hgetall(k.positions)
            pipe.hgetall(k.timers)
            pipe.hgetall(k.pending)
            pipe.hget(k.meta, "commits")
            pipe.hgetall(k.segments)

        positions_raw, timers_raw, pending_raw, commits, segments_raw = execute(self._r, build)
        seen = self.seen_ids(interval)
        return Snapshot(
            token=token,
            positions={f.decode(): int(v) for f, v in positions_raw.items()},
            timers=[decode_entry(f, v) for f, v in timers_raw.items()],
            pending={key: self._pending(blob) for key, blob in pending_raw.items()},
            seen=seen,
            commits=int(commits or 0),
            segments={key: decode_segments(raw) for key, raw in segments_raw.items()},
        )

    def _pending(self, blob: bytes) -> list[Production]:
        batch = decode_batch(blob)
        return [p._replace(headers=()) for p in batch] if self._headless else batch

    def fenced_set(self, interval: IntervalId, token: str, key: str, value: str | int) -> None:
        """Set ``key`` only while ``token`` is the interval's current token."""
        try:
            self._fenced_set(keys=[self.keys(interval).token, key], args=[token, value])
        except redis.ResponseError as exc:
            if str(exc).startswith("FENCED"):
                raise FencedError(str(interval), token, "token") from exc
            raise

    def release(self, interval: IntervalId, token: str) -> bool:
        """A clean stop: clear the interval's recorded owner if ``token`` is current."""
        k = self.keys(interval)
        return bool(self._release(keys=[k.token, k.meta], args=[token]))

    def positions(self, interval: IntervalId) -> dict[str, int]:
        """The interval's checkpointed input positions ("topic:partition" -> next offset)."""
        raw = self._r.hgetall(self.keys(interval).positions)
        return {(f.decode() if isinstance(f, bytes) else str(f)): int(v) for f, v in raw.items()}

    def current_token(self, interval: IntervalId) -> str | None:
        raw = self._r.get(self.keys(interval).token)
        return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)

    def load_state(self, interval: IntervalId, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        result = self._r.hmget(self.keys(interval).state, list(keys))
        return [v if isinstance(v, bytes) or v is None else v.encode() for v in result]

    def whole_state(
        self, interval: IntervalId, max_keys: int, max_bytes: int, chunk: int = 1_000
    ) -> dict[bytes, bytes] | None:
        """By a scan cursor of ``chunk`` (Redis stays responsive), after a look at the size."""
        k = self.keys(interval)
        if int(self._r.hlen(k.state)) > max_keys:
            return None
        out: dict[bytes, bytes] = {}
        size = 0
        for field, value in self._r.hscan_iter(k.state, count=chunk):
            raw = value if isinstance(value, bytes) else str(value).encode()
            size += len(field) + len(raw)
            if size > max_bytes:
                return None
            out[field if isinstance(field, bytes) else str(field).encode()] = raw
        return out

    def seen(self, interval: IntervalId, record_ids: Sequence[bytes]) -> list[bool]:
        """Per id, whether the interval has seen it (in the sorted set or a bucket,
        whichever way it was written)."""
        if not record_ids:
            return []
        k = self.keys(interval)
        hits = self._seen(keys=[k.seen, k.seen_index], args=list(record_ids))
        return [bool(h) for h in hits]

    def seen_ids(self, interval: IntervalId, chunk: int = 50_000) -> list[bytes]:
        """Every seen id (recovery fills the Bloom filter with them): the sorted set's in
        chunks by rank, then each bucket's by a scan cursor of ``chunk``: a takeover
        reads tens of thousands at once, and a chunk keeps Redis responsive."""
        k = self.keys(interval)
        out: list[bytes] = []
        while True:
            part: list[bytes] = self._r.zrange(k.seen, len(out), len(out) + chunk - 1)  # type: ignore[assignment]
            out += part
            if len(part) < chunk:
                break
        buckets: list[bytes] = self._r.zrange(k.seen_index, 0, -1)  # type: ignore[assignment]
        if not buckets:
            return out
        ids = dict.fromkeys(out)  # (a scan may return a member twice)
        for b in buckets:
            key, cursor = f"{k.seen}:{b.decode()}", 0
            while True:
                cursor, members = self._r.sscan(key, cursor, count=chunk)
                ids.update(dict.fromkeys(cast(list[bytes], members)))
                if cursor == 0:
                    break
        return list(ids)

    def commit(self, interval: IntervalId, token: str, checkpoint: Checkpoint) -> int:
        result = self.commit_many([(interval, token, checkpoint)])[0]
        if isinstance(result, FencedError):
            raise result
        return result

    def commit_many(self, commits: Sequence[tuple[IntervalId, str, Checkpoint]]) -> list[int | FencedError]:
        """Each checkpoint as its own atomic, fenced script call, all in one round trip."""
        calls = [self._commit_call(iv, token, cp) for iv, token, cp in commits]
        delay = 0.05
        for attempt in range(self._retries + 1):
            try:
                replies = self._commit.call_many(calls)
                break
            except (redis.ConnectionError, redis.TimeoutError):
                # Re-applying a checkpoint is idempotent (it only sets values), and the
                # token check still guards it, so a retry after a lost reply is safe.
                if attempt == self._retries:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        results: list[int | FencedError] = []
        for (interval, token, _), reply in zip(commits, replies, strict=True):
            if isinstance(reply, redis.ResponseError):
                text = str(reply)
                if not text.startswith("FENCED"):
                    raise CheckpointError(f"{interval}: {text}") from reply
                reason = "restarted" if "restarted" in text else "token"
                results.append(FencedError(str(interval), token, reason))
            else:
                results.append(int(reply))
        return results

    def _commit_call(self, interval: IntervalId, token: str, cp: Checkpoint) -> Call:
        """The commit script's call for one checkpoint: its keys and arguments, or the
        call packed whole (as the core's packer makes it)."""
        keys = self.keys(interval).commit_keys(self._seen_buckets)
        return keys, self._pack(self._commit.sha, keys, token, self._fencing, cp)

    def commits_by_token(self, interval: IntervalId) -> dict[str, int]:
        """How many commits each token got accepted (an audit trail for the tests)."""
        raw = self._r.hgetall(self.keys(interval).meta)
        out: dict[str, int] = {}
        for f, v in raw.items():
            name = f.decode() if isinstance(f, bytes) else str(f)
            if name.startswith("c:"):
                out[name[2:]] = int(v)
        return out
