"""User headers on the real broker, through crashes and re-sends (``mwcore.api.headers``).

A producer outside the kit writes the running sum's inputs with a ``trace`` header each
(and one of the kit's reserved names in another case, which user code must not see). The
computation (``tests.support.computations:HeadedSum``) forwards the headers it sees and
adds the record's amount as ``n``. Workers are SIGKILLed just after sending a checkpoint's productions and
before deleting them (``after_produce``), so the next owner sends them again from the
checkpoint: a plain reader then sees copies of one production id, and every copy must
carry the headers of the record it came from. Both cores.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import topic_name
from testbed import wire
from testbed.procs import joined, wait_until
from testbed.topics import read_topic
from testbed.wire import source_writer
from tests.support.running_sum import Deployment, Injector, InputRecord, fired_points, make_inputs, verify

pytestmark = pytest.mark.interop

HEADED = "tests.support.computations:HeadedSum"
KILLS = 3
STORM_S = 120


def _trace(rec: InputRecord) -> list[tuple[str, bytes]]:
    # "Mw-Hidden": one of the kit's names in another case, from a producer outside it
    return [("trace", b"t-" + rec.id.hex().encode()), ("Mw-Hidden", b"x")]


def storm(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, **env: str
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """The headed sum's workers killed ``KILLS`` times after sending and before deleting,
    then every record processed: what ``verify`` found, each production whose headers are
    not its record's, and how many productions were sent more than once."""
    inputs = make_inputs(6_000, 60, dup_rate=0.0, seed=41)
    dep = Deployment.on(stack, namespace, tmp_path, computation=HEADED, worker_env=env)
    fault_log = tmp_path / "faults.jsonl"
    armed = {"MW_FAULTS": "after_produce:kill:0.1", "MW_FAULT_LOG": str(fault_log)}
    workers = [dep.add_worker("w0"), dep.add_worker("w1")]
    for w in workers:
        w.start()
    writer = source_writer(stack, registry, dep.numbers, "mw.examples.Number")
    injector = Injector(writer, inputs, rate=1_000, hold_at=int(len(inputs) * 0.8), headers=_trace)
    injector.start()
    try:
        wait_until(lambda: min(dep.commits()) >= 2, 60, what="two checkpoints per interval")
        deadline = time.monotonic() + STORM_S
        for w in workers:
            w.kill()
            w.start(**armed)
        while sum(fired_points(fault_log).values()) < KILLS:
            assert time.monotonic() < deadline, f"{KILLS} kills not reached in {STORM_S} s"
            assert injector.error is None, injector.error
            for w in workers:
                if not w.alive:
                    w.start(**armed)
            time.sleep(0.1)
        injector.release.set()
        joined(injector, 60, "the injector")
        for w in workers:  # finish unarmed
            w.kill()
            w.start()
        dep.wait_caught_up(writer.end_offsets, timeout=120)
    finally:
        for w in workers:
            w.terminate()

    by_key: dict[str, list[InputRecord]] = defaultdict(list)
    for rec in inputs:
        by_key[rec.key].append(rec)
    sums = topic_name(namespace, "sums")
    decode = wire.serde(stack, registry, sums, "mw.examples.Sum").decode
    copies: Counter[bytes] = Counter()
    wrong = []
    for m in read_topic(stack.bootstrap, sums):
        value = decode(m.value)
        source = by_key[value["key"]][value["count"] - 1]  # the record this sum came from
        want = {"trace": b"t-" + source.id.hex().encode(), "n": str(source.n).encode()}
        got = {name: v for name, v in m.headers.items() if not name.startswith("mw-")}
        if got != want:
            wrong.append((value, got, want))
        copies[m.id] += 1
    resent = sum(1 for n in copies.values() if n > 1)
    print(f"{len(copies)} productions, {resent} of them sent again after a kill, {len(wrong)} copies wrong")
    return verify(inputs, registry, dep), wrong, resent


@pytest.mark.parametrize("core", ["python", "native"])
def test_headers_round_trip_through_a_crash_and_re_send(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path, core: str
) -> None:
    problems, wrong, resent = storm(stack, registry, namespace, tmp_path, MW_CORE=core)
    assert problems == [], "\n".join(problems)
    assert wrong == [], wrong[:5]
    assert resent > 0  # the re-sent copies (from the checkpoint) were among those checked


@pytest.mark.negative_control
def test_negative_control_a_checkpoint_without_headers_loses_them_in_the_re_send(
    stack: LocalStack, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    """The new owner reads its pending productions back without their headers
    (``MW_UNSAFE_RECOVER_WITHOUT_HEADERS``): right for the kit, but the copies it sends
    again carry none."""
    problems, wrong, resent = storm(
        stack, registry, namespace, tmp_path, MW_UNSAFE_RECOVER_WITHOUT_HEADERS="1"
    )
    assert problems == [], "\n".join(problems)
    assert resent > 0 and wrong, (resent, len(wrong))
    assert all(got == {} for _, got, _ in wrong)  # the re-sent copies, bare
