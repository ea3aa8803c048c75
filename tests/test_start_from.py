"""``Options(start_from="latest")``: a computation that starts at the end of its input.

Records written before its first start are never read; its starting offsets are made
durable as soon as the consumer knows them, so a worker SIGKILLed before its first
record resumes there, and every record written after that is processed exactly once.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from testbed.procs import wait_until
from testbed.wire import source_writer
from tests.support.running_sum import PARTITIONS, Deployment, InputRecord, verify

pytestmark = pytest.mark.exactly_once


def test_latest_skips_what_came_before_and_keeps_its_start_across_a_crash(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(17)
    dep = Deployment.on(
        stack,
        namespace,
        tmp_path,
        computation="tests.support.computations:LatestSum",
    )
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")

    def write(count: int, ts: int) -> list[InputRecord]:
        out = []
        for i in range(count):
            rec = InputRecord(f"key-{rng.randrange(20)}", rng.randint(1, 9), ts + i, rng.randbytes(16))
            writer.write(rec.key, {"n": rec.n}, rec.ts, rec.id)
            out.append(rec)
        writer.flush()
        return out

    write(400, 1_000)  # before the computation ever ran: never read
    old_ends = dict(writer.end_offsets)
    assert sum(old_ends.values()) == 400
    worker = dep.add_worker("l0").start()
    try:

        def started_at_the_end() -> bool:
            for p in range(PARTITIONS):
                pos = dep.r.hget(dep.key(p, "pos"), f"{dep.numbers}:{p}")
                if pos is None or int(pos) != old_ends.get(p, 0):
                    return False
            return True

        wait_until(started_at_the_end, 60, 0.1, "the starting offsets to be in the checkpoints")
        worker.kill()  # before its first record
        new = write(300, 10_000)
        worker.start()
        dep.wait_caught_up(writer.end_offsets, timeout=120)
    finally:
        worker.terminate()
    # every new record exactly once (sums, state and timer totals), none of the old ones
    problems = verify(new, registry, dep)
    assert problems == [], "\n".join(problems)
