"""``mw run --processes N``: N worker processes of one computation on one machine.

The intervals spread over the processes as over separate machines (each process owns
some), a process SIGKILLed is started again by the parent and its intervals move and
come back, the result stays exact, and SIGTERM to the parent stops them all cleanly.
A child's configuration error stops the parent with exit code 2 and the child's one
line.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from testbed.procs import ROOT, joined, wait_until
from testbed.wire import source_writer
from tests.support.running_sum import COMPUTATION, PARTITIONS, Deployment, Injector, make_inputs, verify


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


@pytest.mark.exactly_once
def test_processes_share_the_intervals_and_a_killed_one_comes_back(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    dep = Deployment.on(stack, namespace, tmp_path)
    pool = dep.add_worker("pool")
    pool.command = ("run", COMPUTATION, "--processes", "3")
    pool.start()
    inputs = make_inputs(30_000, 300, dup_rate=0.01, seed=37)
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=2_000)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 90, what="two checkpoints per interval")

        def owners() -> set[str]:
            return {(dep.r.hget(dep.key(i, "meta"), "owner") or b"").decode() for i in range(PARTITIONS)}

        def processes() -> set[str]:
            return {o.rsplit("-", 1)[-1] for o in owners()}

        # Owners are read from the last commit of each interval, so while the group
        # settles a process's earlier commit can still name it: wait for the settled
        # spread (each of the three processes owning intervals), not a glimpse of it.
        spread = {"0", "1", "2"}
        wait_until(lambda: processes() == spread, 90, what="the intervals spread over the three processes")
        first = _children(pool.pid)
        assert len(first) == 3, first
        os.kill(first[1], signal.SIGKILL)
        wait_until(lambda: len(set(_children(pool.pid)) - set(first)) == 1, 30, what="the pool to restart it")
        wait_until(lambda: len(owners()) == 3, 60, what="the restarted process to own intervals again")
        joined(injector, 120, "the injector")
        dep.wait_caught_up(writer.end_offsets, timeout=180)
    finally:
        injector.release.set()
        code = pool.terminate(60)
    assert code == 0, pool.logs()[-3000:]
    problems = verify(inputs, registry, dep)
    assert problems == [], "\n".join(problems)
    assert '"pool_child_restarted"' in pool.logs()


def test_a_childs_configuration_error_stops_the_pool_with_its_line(stack: LocalStack, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MW_")} | {
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": "redis://127.0.0.1:1/0",  # nothing listens there
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
    }
    t0 = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", COMPUTATION, "--processes", "2"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    refusals = [line for line in done.stderr.splitlines() if line.startswith("mw: configuration error:")]
    assert refusals and "MW_REDIS_URL=redis://127.0.0.1:1/0: cannot reach Redis" in refusals[0], done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - t0 < 60
