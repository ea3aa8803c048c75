"""The engines without a broker (``runtime/in_memory.py``: the harness, and ``mw
batch``'s and Spark's ``KeyRunner``, fed from archived topics) apply the worker's bounds
(semantics I-12): a key over ``MAX_KEY_BYTES``, a timestamp outside ``MIN_TIMESTAMP`` to
``MAX_TIMESTAMP`` or headers over theirs is a failure with the reason a worker's dead
letter gives, and the records around it are processed."""

from __future__ import annotations

import pytest

from mwcore.archive.batch import Encoded, KeyRunner
from mwcore.errors import InvalidRecord
from mwcore.examples.running_sum import RunningSum
from mwcore.limits import MAX_KEY_BYTES
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.testing import Harness
from tests.conftest import ROOT

pytestmark = pytest.mark.hostile


def registry() -> SchemaRegistry:
    return SchemaRegistry.from_directory(ROOT / "schemas")


def test_the_batch_engine_fails_records_out_of_bounds_and_runs_the_rest() -> None:
    reg = registry()
    encode = AvroSerde(reg, "mw.examples.Number").encode
    runner = KeyRunner(RunningSum, reg)
    long_key = "k" * (2 * MAX_KEY_BYTES)  # over 64 KiB: its production's key would not pack
    records = [
        Encoded("numbers", "a", 1_000, b"1" * 16, encode({"n": 1})),
        Encoded("numbers", "a", 2**63, b"2" * 16, encode({"n": 100})),  # beyond a signed long
        Encoded("numbers", "a", -5, b"3" * 16, encode({"n": 100})),
        Encoded("numbers", "a", 3_000, b"4" * 16, encode({"n": 2})),
    ]
    out = list(runner.run_key(records))
    out += list(runner.run_key([Encoded("numbers", long_key, 1_000, b"5" * 16, encode({"n": 7}))]))
    sums = AvroSerde(reg, "mw.examples.Sum")
    totals = [sums.decode(e.value)["total"] for e in out if e.stream == "sums"]
    assert totals == [1, 3]
    assert runner.failures == 3
    assert runner.reasons == {"bad_timestamp": 2, "key_too_long": 1}


def test_the_harness_says_why_as_a_worker_would() -> None:
    h = Harness(RunningSum, registry(), raise_errors=False)
    h.send("numbers", {"n": 1}, 2**63, key="a")
    h.send("numbers", {"n": 1}, 1, key="x" * (MAX_KEY_BYTES + 1))
    h.send("numbers", {"n": 1}, 1, key="b", headers=[(f"h{i}", b"") for i in range(65)])
    h.send("numbers", {"n": 1}, 1, key="c")
    reasons = [getattr(f.error, "reason", None) for f in h.take_failures()]
    assert reasons == ["bad_timestamp", "key_too_long", "headers_too_large"]
    assert [p.value["total"] for p in h.output("sums")] == [1]
    with pytest.raises(InvalidRecord, match="bad_timestamp"):
        Harness(RunningSum, registry()).send("numbers", {"n": 1}, 2**63, key="a")
