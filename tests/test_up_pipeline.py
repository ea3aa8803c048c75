"""The repository's ``[tool.mw]`` table and Zeitgeist's hooks for ``mw up``, without
a stack: the services it names exist, the hooks implement the library's protocol with
public names only, and their summary fields are those README.md shows."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

from mwcore.api.computation import load_computation
from mwcore.tools.project import find_project
from mwcore.tools.up.plan import Pipeline, load_pipeline
from services.injector.truth import load_truth
from services.up import Zeitgeist, service_names
from tests.conftest import ROOT

# The fields Zeitgeist's hooks add to `mw up`'s summary, in order (README.md shows them).
ZEITGEIST_FIELDS = [
    "records_injected",
    "windows_produced",
    "anomalies_reported",
    "scripted_detectable",
    "precision",
    "recall",
    "median_detection_delay_ms",
    "median_delay_from_anomaly_start_ms",
]


def test_the_table_names_every_service_and_the_hooks() -> None:
    project = find_project(ROOT)
    assert project is not None and project.root == ROOT and project.up is not None
    assert list(project.up.services) == service_names()  # as bench/soak.py starts them
    assert set(project.up.streams) >= {"queries", "window_counts", "anomalies"}
    assert isinstance(load_pipeline(project.up.pipeline or "", ROOT), Zeitgeist)
    assert project.batch is not None
    for target in project.batch.computations:
        load_computation(target)


def test_the_hooks_import_no_library_internals() -> None:
    tree = ast.parse((ROOT / "services" / "up.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m and m.startswith("mwcore.")}


def test_the_summary_scores_what_was_reported(tmp_path: Path) -> None:
    z = Zeitgeist()
    assert isinstance(z, Pipeline)
    env = z.environment(tmp_path).get("*", {})
    stop = threading.Event()
    stop.set()  # the generator writes the script (truth.jsonl), then stops at once
    z.start(env, stop, rate=100, duration=60)
    z.summary({}, {})
    truth = [t for t in load_truth(tmp_path / "querylogs") if t["detectable"]]
    assert truth
    hit = truth[0]
    anomaly = {
        "kind": hit["kind"],
        "query": hit["query"],
        "start": hit["start"],
        "detected_bucket": hit["start"],
        "expected": 10.0,
        "observed": 99.0,
    }
    z.on_record("anomalies", anomaly, b"id-1")
    z.on_record("anomalies", {**anomaly, "phase": "CLOSE", "detected_bucket": hit["end"]}, b"id-2")
    last = z.view_lines()[-1]
    assert last.endswith(" scripted") and "not scripted" not in last
    summary = z.summary({"queries": 7, "window_counts": 3}, {"dip_detector": hit["end"]})
    assert list(summary) == ZEITGEIST_FIELDS
    assert summary["records_injected"] == 7 and summary["windows_produced"] == 3
    assert summary["anomalies_reported"] == 1 and summary["precision"] == 1.0  # one episode: OPEN, CLOSE
    assert summary["scripted_detectable"] >= 1
