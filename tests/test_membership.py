"""Group membership: ``MW_INSTANCE_ID`` (static membership) on Apache Kafka.

Two workers share a computation's intervals. One is SIGKILLed and started again at
once (its next run waits, started and imported, for the moment of the restart):

- as a static member (``MW_INSTANCE_ID``) it gets its own intervals back and the
  other worker sees no rebalance at all (no revocation, no new assignment); left dead,
  it is evicted after the session timeout and the other worker takes its intervals;
- as a dynamic member (the default) its return rebalances the other worker too (the
  contrast that shows the check above can see a rebalance).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from testbed.procs import WorkerProc, wait_until
from tests.support.running_sum import PARTITIONS, Deployment

pytestmark = pytest.mark.fencing


def events(w: WorkerProc) -> list[dict[str, object]]:
    """The group events ("assigned", "revoked") of a worker's current run, in order."""
    out = []
    for line in w.current_log().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") in ("assigned", "revoked"):
            out.append(e)
    return out


def owned(w: WorkerProc) -> set[int]:
    """The intervals a worker holds by its log (its last assignment, unless revoked since)."""
    evs = events(w)
    if not evs or evs[-1]["event"] != "assigned":
        return set()
    return set(evs[-1]["intervals"])  # type: ignore[call-overload]


@pytest.mark.parametrize("static", [True, False], ids=["static", "dynamic"])
def test_a_restarted_static_member_gets_its_intervals_back_without_a_rebalance(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, static: bool
) -> None:
    dep = Deployment.on(stack, namespace, tmp_path)
    member = {"a": f"{namespace}-a", "b": f"{namespace}-b"}
    a, b = dep.add_worker("a"), dep.add_worker("b")
    release = tmp_path / "release"
    # a's next run: started beforehand, waiting (imports done) for the release file
    again = WorkerProc(
        dep.computation,
        dep.env(),
        tmp_path,
        "a-again",
        command=(str(release), "run", dep.computation),
        module="tests.support.warm_start",
    )

    def start(w: WorkerProc, name: str) -> None:
        # A static member's session is what a restart must beat: 6 s (Kafka's minimum
        # default), as a deployment with static members would set, not the 1.5 s that
        # a loaded machine's restart (imports done, then connections and the join) can take
        w.start(**({"MW_INSTANCE_ID": member[name], "MW_SESSION_TIMEOUT_MS": "6000"} if static else {}))

    try:
        start(a, "a")
        start(b, "b")

        def shared(a: WorkerProc) -> bool:
            return bool(owned(a)) and bool(owned(b)) and owned(a) | owned(b) == set(range(PARTITIONS))

        wait_until(lambda: shared(a), 90, 0.2, "the two workers to share the intervals")
        start(again, "a")
        wait_until(lambda: Path(f"{release}.ready").exists(), 60, 0.05, "a's next run to be ready")
        mine, before = owned(a), len(events(b))
        a.kill()
        began = time.monotonic()
        release.touch()  # a restarts
        wait_until(lambda: bool(owned(again)), 90, 0.1, "the restarted worker to be assigned")
        back_in = time.monotonic() - began
        print(f"{'static' if static else 'dynamic'}: assigned again {back_in:.1f}s after the SIGKILL")
        if static:
            assert owned(again) == mine, (mine, events(again))
            assert len(events(b)) == before, f"the other worker was rebalanced: {events(b)[before:]}"
            # Left dead, a static member is evicted at its session timeout.
            again.kill()
            wait_until(lambda: owned(b) == set(range(PARTITIONS)), 90, 0.2, "the other worker to take over")
        else:
            wait_until(lambda: shared(again) and len(events(b)) > before, 90, 0.2, "the rebalance")
            assert any(e["event"] == "revoked" for e in events(b)[before:]), events(b)
    finally:
        for w in (a, again, b):
            w.terminate()
