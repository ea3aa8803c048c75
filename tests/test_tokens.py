"""Token uniqueness across a Redis restart that lost the tail of its AOF (semantics I-6).

Redis is restarted from an older copy of its data directory (what a crash with
``appendfsync everysec`` can leave). Former owners still hold the tokens granted after
that copy; no new grant may repeat one, and no token from before the restart, not even
the one the rolled-back Redis holds as current, may commit. Negative control: tokens
from the counter alone (``MW_UNSAFE_COUNTER_TOKENS``) fail the same check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

from mwcore.controls import SAFE, NegativeControls
from mwcore.errors import FencedError
from mwcore.store.checkpoint import Checkpoint
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.tools.stack.localstack import RedisServer

IV = IntervalId("tok", "comp", 0)


def _rollback_scenario(tmp_path: Path, controls: NegativeControls) -> tuple[set[str], list[str], list[str]]:
    """Returns (tokens held before the restart, grants after it, old tokens that could commit)."""
    server = RedisServer(directory=tmp_path / "redis", appendfsync="always").start()
    try:
        store = RedisCheckpointStore(redis.Redis(port=server.port), controls=controls)
        t1 = store.grant(IV, "a")
        store.commit(IV, t1, Checkpoint(positions={"in:0": 10}))
        snapshot = tmp_path / "older-copy"
        shutil.copytree(server.directory, snapshot)  # type: ignore[arg-type]
        held = {t1, store.grant(IV, "b"), store.grant(IV, "c")}  # zombies hold all three

        server.kill()
        shutil.rmtree(server.directory)  # type: ignore[arg-type]
        shutil.copytree(snapshot, server.directory)  # type: ignore[arg-type]
        server.start()
        store = RedisCheckpointStore(redis.Redis(port=server.port), controls=controls)
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


def token_problems(held: set[str], grants: list[str], could_commit: list[str]) -> list[str]:
    """What breaks single ownership after the rollback (empty when nothing does)."""
    problems = []
    if held & set(grants):
        problems.append(f"{len(held & set(grants))} grants repeated a token a former owner holds")
    if len(set(grants)) != len(grants):
        problems.append("two grants after the restart gave the same token")
    if could_commit:
        problems.append(f"{len(could_commit)} tokens from before the restart could still commit")
    return problems


@pytest.mark.fencing
def test_no_token_repeats_and_old_tokens_are_void_after_rollback(tmp_path: Path) -> None:
    problems = token_problems(*_rollback_scenario(tmp_path, SAFE))
    assert problems == [], problems


@pytest.mark.fencing
@pytest.mark.negative_control
def test_negative_control_counter_tokens_repeat_after_rollback(tmp_path: Path) -> None:
    """The same rollback and check with tokens from the counter alone (no run id, no
    random part): the rolled-back counter hands out a held token again."""
    problems = token_problems(*_rollback_scenario(tmp_path, NegativeControls(counter_tokens=True)))
    assert any("repeated a token" in p for p in problems), problems
    assert any("could still commit" in p for p in problems), problems
