"""``mw up --duration``: the README's first command runs the whole Zeitgeist pipeline in
real time on its own local stack (as the repository's ``[tool.mw.up]`` table names
it), and its last line is the JSON summary. On the default scenario's first 100 s (a
spike at 40 s, a language going silent at 80 s; its second spike, at 120 s, is of the
first's kind) it must find every detectable scripted anomaly, report nothing else,
and report within 3 s of the end of the bucket that decides it. Outside a project,
``mw up`` runs the library's running-sum example."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.e2e]
ROOT = Path(__file__).resolve().parent.parent


def mw_up(cwd: Path, seconds: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "mwcore", "up", "--duration", str(seconds)],
        cwd=cwd,
        env={k: v for k, v in os.environ.items() if not k.startswith("MW_")},
        capture_output=True,
        text=True,
        timeout=seconds + 260,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("mw up: Apache Kafka ") and ", logs in " in lines[0]
    assert ", schema registry http://127.0.0.1:" in lines[0]
    assert lines[1].startswith("mw up: metrics ")
    summary: dict[str, Any] = json.loads(lines[-1])
    return summary


def machine_load() -> str:
    """The load average and the processes (not the kernel's) that have used the most CPU
    in all (``%CPU``: their average over their lifetime)."""
    load = "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    try:
        ps = subprocess.run(
            ["ps", "-eo", "pid,etime,time,pcpu,args", "--sort=-cputime"], capture_output=True, text=True
        )
    except OSError as exc:  # no procps
        return f"{load}; ps: {exc}"
    top = [line[:160] for line in ps.stdout.splitlines() if not line.split(None, 4)[-1].startswith("[")][:9]
    return f"{load}; the busiest processes:\n" + "\n".join(top)


@pytest.mark.slow
def test_mw_up_runs_the_pipeline_and_detects_the_scripted_anomalies() -> None:
    summary = mw_up(ROOT, 100)
    print(f"mw up summary: {json.dumps(summary)}")
    print(machine_load())  # the real-time bounds below lose to a busy machine: say how busy
    from mwcore.tools.stack.kafka_broker import KAFKA_VERSION
    from tests.test_up_pipeline import ZEITGEIST_FIELDS

    assert list(summary) == [  # as README.md shows them
        "seconds",
        "services",
        "broker",
        "schema_registry",
        *ZEITGEIST_FIELDS,
        "watermark_lag_ms",
        "exited",
        "metrics",
        "logs",
    ]
    # the model trainer is a batch job: it finishes (exit 0); nothing else stops
    assert [(e["service"], e["exit_code"]) for e in summary["exited"]] in ([], [("model_trainer", 0)]), (
        summary
    )
    assert summary["broker"] == {"product": "Apache Kafka", "version": KAFKA_VERSION}  # as it logged
    from mwcore.tools.stack.schema_registry import APICURIO_VERSION

    registry = summary["schema_registry"]
    assert (registry["product"], registry["version"]) == ("Apicurio Registry", APICURIO_VERSION)
    assert registry["url"].startswith("http://127.0.0.1:") and registry["url"].endswith("/apis/ccompat/v7")
    assert set(summary["services"]) >= {"watermark_authority", "injector", "windower", "dip_detector"}
    assert summary["records_injected"] > 100_000 and summary["windows_produced"] > 10_000
    assert summary["scripted_detectable"] >= 3  # the spike and the detectable queries of the dip
    assert summary["recall"] >= 0.95 and summary["precision"] >= 0.95, summary
    assert summary["median_detection_delay_ms"] < 3000, summary
    assert summary["watermark_lag_ms"]["dip_detector"]["median"] < 5000


def test_mw_up_outside_a_project_runs_the_example(tmp_path: Path) -> None:
    summary = mw_up(tmp_path, 15)  # no pyproject.toml, no schemas/ at or above tmp_path
    print(f"mw up summary: {json.dumps(summary)}")
    assert summary["services"] == ["running_sum-1", "running_sum-2"]
    assert summary["exited"] == [], summary["exited"]
    assert summary["records_injected"] > 10_000
    assert summary["records_committed"] == summary["records_injected"], summary
    assert summary["outputs"]["sums"] >= summary["records_injected"] and summary["outputs"]["totals"] > 0
