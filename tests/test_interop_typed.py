"""Typed records on the real broker (``serde/typed.py``): workers of the order totals
(``tests/support/typed.py``) decode each order into a dataclass (or a pydantic model),
keep a typed state in Redis, and produce typed totals; a reader outside them decodes
the totals as plain Avro and finds every customer's exact sequence, each production
once. A type that does not match its schema stops the worker at start: one line,
exit 2. Both cores.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed import wire
from testbed.procs import ROOT, WorkerProc, wait_until, worker_env
from testbed.topics import read_topic
from tests.support.typed import SCHEMAS

pytestmark = pytest.mark.interop

ORDERS = 1_200
CUSTOMERS = 40


def make_orders(seed: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for i in range(ORDERS):
        lines = [
            {
                "sku": f"s{rnd.randrange(50)}",
                "qty": rnd.randrange(1, 5),
                "price": rnd.randrange(100, 5_000) / 100,
            }
            for _ in range(rnd.randrange(0, 4))
        ]
        note = None if rnd.random() < 0.7 else f"note {i}"
        out.append({"id": f"o{i}", "customer": f"c{rnd.randrange(CUSTOMERS)}", "lines": lines, "note": note})
    return out


def expected(orders: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each customer's totals in order, computed here from the dicts (not by the types)."""
    out: dict[str, list[dict[str, Any]]] = {}
    tallies: dict[str, tuple[int, float, str, float]] = {}
    for o in orders:
        n, total, big, big_amount = tallies.get(o["customer"], (0, 0.0, "", 0.0))
        spent = round(sum(line["qty"] * line["price"] for line in o["lines"]), 2)
        n, total = n + 1, round(total + spent, 2)
        if n == 1 or spent > big_amount:
            big, big_amount = o["id"], spent
        tallies[o["customer"]] = (n, total, big, big_amount)
        out.setdefault(o["customer"], []).append(
            {
                "customer": o["customer"],
                "orders": n,
                "total": total,
                "biggest": {"order": big, "amount": big_amount},
            }
        )
    return out


def run_totals(
    stack: LocalStack, namespace: str, tmp_path: Path, computation: str, **env: str
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]], int]:
    """Orders written, one worker of ``computation`` run until every total is out: what
    came out by customer (in order), what should have, and the copies beyond one."""
    registry = SchemaRegistry.from_directory(SCHEMAS)
    orders_topic, totals_topic = topic_name(namespace, "orders"), topic_name(namespace, "order_totals")
    ensure_topics(stack.bootstrap, {orders_topic: 4})
    orders = make_orders(seed=7)
    writer = wire.source_writer(stack, registry, orders_topic, "mw.tests.Order")
    for i, o in enumerate(orders):
        writer.write(o["customer"], o, 1_700_000_000_000 + i)
    writer.flush()
    assert writer.errors == 0
    w = WorkerProc(
        computation, worker_env(stack, namespace, MW_SCHEMAS_DIR=str(SCHEMAS), **env), tmp_path, "w0"
    )
    w.start()
    try:
        wait_until(
            lambda: len(read_topic(stack.bootstrap, totals_topic, timeout=20)) >= ORDERS,
            120,
            1.0,
            f"{ORDERS} totals (log: {w.current_log()})",
        )
    finally:
        assert w.terminate() == 0, w.logs()
    decode = wire.serde(stack, registry, totals_topic, "mw.tests.OrderTotal").decode
    got: dict[str, list[dict[str, Any]]] = {}
    seen: set[bytes] = set()
    copies = 0
    for m in sorted(read_topic(stack.bootstrap, totals_topic), key=lambda m: (m.partition, m.offset)):
        if m.id in seen:
            copies += 1
            continue
        seen.add(m.id)
        value = decode(m.value)
        got.setdefault(value["customer"], []).append(value)
    return got, expected(orders), copies


@pytest.mark.parametrize("core", ["python", "native"])
@pytest.mark.parametrize(
    "computation",
    ["tests.support.typed:TypedTotals", "tests.support.typed:ModelTotals"],
    ids=["dataclass", "pydantic"],
)
def test_typed_records_end_to_end(
    stack: LocalStack, namespace: str, tmp_path: Path, computation: str, core: str
) -> None:
    """Dataclass records (made in Rust on the native core) and pydantic models (made by
    their validator), each on both cores: every customer's exact sequence, each once."""
    got, want, copies = run_totals(stack, namespace, tmp_path, computation, MW_CORE=core)
    assert copies == 0
    assert got == want


def test_a_type_that_does_not_match_its_schema_is_refused_at_deploy(
    stack: LocalStack, namespace: str
) -> None:
    env = worker_env(stack, namespace, MW_SCHEMAS_DIR=str(SCHEMAS))
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "run", "tests.support.typed:MismatchedTotals"],
        env={**os.environ, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "WrongOrder.lines[].qty: the schema's int is not a str" in lines[0], lines[0]
