"""Batch work on a Spark standalone cluster: a master and one worker started from the
PySpark installation (``pyspark/bin/spark-class``), not only ``local[2]``.

``mw batch`` (the running sum over an archived stream) and the model-training job
(``python -m services.model_trainer``) run once with ``--master spark://...`` /
``MW_SPARK_MASTER=spark://...`` and once on ``local[2]``, each in its own process
(the two at once: a Spark job's start is mostly the JVM's, which two overlap), and give
the same results; the master's record of finished applications shows the cluster did
the work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pyspark
import pytest

from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localproc import free_port, stop_processes, wait_for_port
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed import wire
from testbed.topics import read_topic
from testbed.wire import source_writer
from tests.conftest import ROOT
from tests.support.running_sum import COMPUTATION, make_inputs

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.slow]


class Standalone:
    """A Spark master and one worker (2 cores, 2 GiB) on free ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port, self.ui_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        home = Path(pyspark.__file__).parent
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "PYSPARK_PYTHON": sys.executable,  # the executors' Python: this one, with mwcore
            "PYTHONPATH": str(ROOT),  # they import the computations (services.*) by name
            "SPARK_LOG_DIR": str(self.directory),
        }
        log = open(self.directory / f"{name}.log", "wb")  # noqa: SIM115 - the child holds it
        proc = subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=env, stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)
        return proc

    def status(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as resp:
            data: dict[str, Any] = json.load(resp)
            return data

    def start(self) -> Standalone:
        self.directory.mkdir(parents=True, exist_ok=True)
        master = self._spawn(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        wait_for_port(self.port, master, "the Spark master", 90)
        wait_for_port(self.ui_port, master, "the Spark master's web UI", 90)
        self._spawn(
            "worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
            "--cores", "2", "--memory", "2g", "--webui-port", str(free_port()),
            "--work-dir", str(self.directory / "work"),
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while self._alive_workers() < 1:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Spark worker registered (logs: {self.directory})")
            time.sleep(0.5)
        return self

    def _alive_workers(self) -> int:
        try:
            return int(self.status().get("aliveworkers", 0))
        except (OSError, ValueError):  # the web UI is still starting
            return 0

    def stop(self) -> None:
        stop_processes(self.procs, 30)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    s = Standalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield s.start()
    finally:
        s.stop()


def _env(stack: LocalStack, namespace: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_NAMESPACE": namespace,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **extra,
    }


def _run(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    last = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert last, f"no JSON summary: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    summary: dict[str, Any] = json.loads(last[-1])
    return summary


def _each_master(masters: Iterable[str], job: Callable[[str], Any]) -> dict[str, Any]:
    """``job(master)`` for each master, at once (each runs its own process)."""
    masters = list(masters)
    with ThreadPoolExecutor(len(masters)) as pool:
        return dict(zip(masters, pool.map(job, masters), strict=True))


def _rows(path: Path) -> list[tuple[Any, ...]]:
    table = pq.read_table(path)
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def test_mw_batch_on_a_standalone_master_equals_local(
    stack: LocalStack, standalone: Standalone, registry: SchemaRegistry, namespace: str, tmp_path: Path
) -> None:
    topic = topic_name(namespace, "numbers")
    ensure_topics(stack.bootstrap, {topic: 4})
    writer = source_writer(stack, registry, topic, "mw.examples.Number")
    for r in make_inputs(5_000, 100, dup_rate=0.0, seed=41):
        writer.write(r.key, {"n": r.n}, r.ts, r.id)
    writer.flush(60)
    before = len(standalone.status().get("completedapps", []))

    def job(master: str) -> list[tuple[Any, ...]]:
        out = tmp_path / ("local" if master.startswith("local") else "standalone")
        argv = [sys.executable, "-m", "mwcore", "batch", "--computations", COMPUTATION, "--input", "numbers"]
        argv += ["--out", str(out), "--master", master]
        summary = _run(argv, _env(stack, namespace))
        assert summary["records"]["sums"] > 0, summary
        return _rows(out / "sums")

    outs = _each_master(("local[2]", standalone.url), job)
    assert outs["local[2]"] == outs[standalone.url]
    assert len(standalone.status().get("completedapps", [])) == before + 1


def test_the_model_job_on_a_standalone_master_equals_local(
    stack: LocalStack, standalone: Standalone, registry: SchemaRegistry, tmp_path: Path
) -> None:
    """Two namespaces, the same archived window counts (three periods of two minutes,
    a rhythm per query); the job trains on each, one on each master."""
    period_ms, slots, start = 120_000, 120, 1_700_000_040_000 - 1_700_000_040_000 % 120_000

    def job(master: str) -> list[tuple[bytes | None, str]]:
        namespace = f"model{abs(hash(master)) % 10**8}{os.getpid()}"
        topic = topic_name(namespace, "window_counts")
        ensure_topics(stack.bootstrap, {topic: 4})
        writer = source_writer(stack, registry, topic, "zeitgeist.WindowCount")
        for q in range(20):
            query = f"q{q}"
            for b in range(3 * period_ms // 1000):
                count = 5 + q + (b % slots) // (10 + q % 5)
                value = {"query": query, "lang": "en", "bucket_start": start + b * 1000, "count": count}
                writer.write(query, value, start + b * 1000)
        writer.flush(60)
        env = _env(stack, namespace, MW_SPARK_MASTER=master)
        argv = [sys.executable, "-m", "services.model_trainer", "--period-ms", str(period_ms)]
        summary = _run([*argv, "--slots", str(slots)], env)
        assert summary["published"] == 20, summary
        models = read_topic(stack.bootstrap, topic_name(namespace, "model_updates"))
        decode = wire.serde(
            stack, registry, topic_name(namespace, "model_updates"), "zeitgeist.ModelUpdate"
        ).decode
        return sorted((m.key, json.dumps(decode(m.value), sort_keys=True)) for m in models)

    published = _each_master(("local[2]", standalone.url), job)
    assert published["local[2]"] == published[standalone.url]
