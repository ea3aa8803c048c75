"""mwcore's container fixtures for users (``mwcore.testing.containers``, the pytest plugin
``mwcore[testing]`` installs) on a real Docker engine, with the images ``make images``
builds here (the ``docker`` fixture: ``dockerd`` started if none answers):

1. ``mw_run`` runs the example computation (``mwcore.examples.running_sum:RunningSum``)
   as a worker on Kafka, Redis and the schema registry in containers: every running sum
   exact, each key's in order, each with its input's timestamp; and a computation on
   typed records (dataclasses) is given them and its outputs come back as them;
2. ``mw new-service`` output passes its own generated tests, both of them (the one in
   memory and the one on containers), run by pytest in a copy of the project;
3. an image named by ``MW_TEST_REDIS_IMAGE`` is the one run (and removed after); an image
   it names that is not there skips the test, saying so.

The plugin's skip where no engine answers is ``libs/mwcore/tests/test_containers_plugin.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from mwcore.examples.running_sum import RunningSum
from mwcore.testing.containers import REDIS_IMAGE, RunOnContainers
from tests.conftest import ROOT
from tests.support.typed import SCHEMAS, Biggest, Line, Order, OrderTotal, TypedTotals
from tests.test_new_service import copy_project

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.interop, pytest.mark.compose, pytest.mark.usefixtures("docker")]


def test_the_fixtures_run_the_example_computation_to_its_exact_sums(mw_run: RunOnContainers) -> None:
    numbers = {"a": [3, 1, 4, 1, 5, 9, 2, 6], "b": [2, 7, 1, 8], "c": [10**12], "d": list(range(1, 31))}
    sent = []
    for i in range(max(len(ns) for ns in numbers.values())):  # the keys interleaved
        for key, ns in numbers.items():
            if i < len(ns):
                sent.append((key, {"n": ns[i]}, 1_000 * (len(sent) + 1)))
    run = mw_run(RunningSum, {"numbers": sent}, expect={"sums": len(sent)}, schemas=ROOT / "schemas")

    got: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for p in run.output("sums"):
        assert p.value["key"] == p.key
        got[p.key].append((p.value["total"], p.value["count"], p.timestamp))
    want: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for key, value, ts in sent:
        total = want[key][-1][0] if want[key] else 0
        want[key].append((total + value["n"], len(want[key]) + 1, ts))
    assert dict(got) == dict(want)
    assert run.namespace in run.log  # the worker's own log, in its own namespace


def test_typed_records_go_in_and_come_out_as_their_types(mw_run: RunOnContainers) -> None:
    """``Input``/``Output(type=...)``: dataclasses written and read back as they are."""
    orders = [
        Order("o1", "ann", [Line("x", 2, 1.5)]),
        Order("o2", "bob", [Line("y", 1, 10.0)], note="gift"),
        Order("o3", "ann", [Line("x", 1, 1.5), Line("z", 3, 2.0)]),
    ]
    sent = [(o.customer, o, 1_000 * i) for i, o in enumerate(orders, start=1)]
    run = mw_run(TypedTotals, {"orders": sent}, expect={"order_totals": 3}, schemas=SCHEMAS)
    got = sorted(run.values("order_totals"), key=lambda t: (t.customer, t.orders))
    assert got == [
        OrderTotal("ann", 1, 3.0, Biggest("o1", 3.0)),
        OrderTotal("ann", 2, 10.5, Biggest("o3", 7.5)),
        OrderTotal("bob", 1, 10.0, Biggest("o2", 10.0)),
    ]


def test_a_new_service_passes_both_its_generated_tests(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": f"{project}{os.pathsep}{ROOT}"}

    def in_project(*cmd: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)

    made = in_project(
        sys.executable, "-m", "mwcore", "new-service", "trends", "--input", "window_counts", timeout=120
    )
    assert made.returncode == 0, made.stderr
    assert (project / "services/trends/tests/test_on_containers.py").is_file()
    tested = in_project(
        sys.executable, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider", "services/trends", timeout=900
    )
    out = tested.stdout + tested.stderr
    assert tested.returncode == 0, out
    assert "test_computation.py::test_counts_per_window_once_the_watermark_passes PASSED" in out, out
    assert "test_on_containers.py::test_counts_per_window_on_containers PASSED" in out, out
    assert "2 passed" in out and "skipped" not in out, out


def test_an_image_named_by_its_variable_is_the_one_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"mwtest/redis-override:{os.getpid()}"
    subprocess.run(["docker", "tag", REDIS_IMAGE, tag], check=True)
    try:
        pytester.makepyfile(
            f"""
            from pathlib import Path

            from mwcore.testing.containers import redis_answers

            def test_redis(mw_redis):
                c = mw_redis.container.get_wrapped_container()
                c.reload()
                Path("container-id").write_text(c.id)
                assert mw_redis.image == "{tag}"
                assert c.attrs["Config"]["Image"] == "{tag}"
                assert redis_answers(int(mw_redis.url.rsplit(":", 1)[1].split("/")[0]))
            """
        )
        monkeypatch.setenv("MW_TEST_REDIS_IMAGE", tag)
        ran = pytester.runpytest_subprocess("-q", "-rs", "-p", "no:cacheprovider")
        ran.assert_outcomes(passed=1)
        container = (pytester.path / "container-id").read_text()
        gone = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, check=False)
        assert gone.returncode != 0 and "No such" in gone.stderr, f"the fixture left {container} behind"

        monkeypatch.setenv("MW_TEST_REDIS_IMAGE", "mwtest/not-here:0")
        skipped = pytester.runpytest_subprocess("-q", "-rs", "-p", "no:cacheprovider")
        skipped.assert_outcomes(skipped=1)
        skipped.stdout.fnmatch_lines(["*image mwtest/not-here:0 is missing*set MW_TEST_REDIS_IMAGE*"])
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
