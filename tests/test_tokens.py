"""Token uniqueness across a Redis restart that lost the tail of its AOF (semantics I-6).

Redis is restarted from an older copy of its data directory (what a crash with
``appendfsync everysec`` can leave). Former owners still hold the tokens granted after
that copy; no new grant may repeat one, and no token from before the restart, not even
the one the rolled-back Redis holds as current, may commit.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

from mwcore.checkpoint import Checkpoint
from mwcore.errors import FencedError
from mwcore.localstack import RedisServer
from mwcore.redis_store import RedisCheckpointStore, TokenScheme
from mwcore.store import IntervalId

IV = IntervalId("tok", "comp", 0)


def _rollback_scenario(tmp_path: Path, scheme: TokenScheme) -> tuple[set[str], list[str], list[str]]:
    """Returns (tokens held before the restart, grants after it, old tokens that could commit)."""
    server = RedisServer(directory=tmp_path / "redis", appendfsync="always").start()
    try:
        store = RedisCheckpointStore(redis.Redis(port=server.port), token_scheme=scheme)
        t1 = store.grant(IV, "a")
        store.commit(IV, t1, Checkpoint(positions={"in:0": 10}))
        snapshot = tmp_path / "older-copy"
        shutil.copytree(server.directory, snapshot)  # type: ignore[arg-type]
        held = {t1, store.grant(IV, "b"), store.grant(IV, "c")}  # zombies hold all three

        server.kill()
        shutil.rmtree(server.directory)  # type: ignore[arg-type]
        shutil.copytree(snapshot, server.directory)  # type: ignore[arg-type]
        server.start()
        store = RedisCheckpointStore(redis.Redis(port=server.port), token_scheme=scheme)
        assert store.recover(IV, "").positions == {"in:0": 10}, "the restart did not restore the copy"

        could_commit = []
        for token in sorted(held):
            try:
                store.commit(IV, token, Checkpoint(positions={"in:0": 99}))
                could_commit.append(token)
            except FencedError:
                pass
        grants = [store.grant(IV, f"new-{i}") for i in range(5)]
        return held, grants, could_commit
    finally:
        server.stop()


@pytest.mark.fencing
def test_no_token_repeats_and_old_tokens_are_void_after_rollback(tmp_path: Path) -> None:
    held, grants, could_commit = _rollback_scenario(tmp_path, "safe")
    assert not held & set(grants), "a grant repeated a token a former owner holds"
    assert len(set(grants)) == len(grants)
    assert could_commit == [], "a token from before the restart could still commit"


@pytest.mark.fencing
def test_negative_control_counter_tokens_repeat_after_rollback(tmp_path: Path) -> None:
    held, grants, could_commit = _rollback_scenario(tmp_path, "counter-only")
    assert held & set(grants), "the control did not reproduce a repeated token"
    assert could_commit, "the control did not let a pre-restart token commit"
