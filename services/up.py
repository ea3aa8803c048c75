"""The Zeitgeist pipeline's part in ``mw up`` (``[tool.mw.up] pipeline`` in pyproject.toml).

``mw up`` starts the local stack and the services; this feeds them and judges what
they find: the traffic generator writes query logs in real time for the injector (in
the run's directory), each anomaly reported is checked against the generator's script
(``truth.jsonl``) as it comes, the live view lists the latest, and the summary gives
precision, recall and detection delays. It uses no mwcore internals: ``mw up`` calls
it through built-in types only (``mwcore.tools.up.plan.Pipeline``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from services.injector.generator import generate
from services.injector.scenario import Scenario
from services.injector.truth import load_truth, score

ROOT = Path(__file__).resolve().parent.parent
FIRST = ("watermark_authority", "injector")  # started first; the rest in name order
PARTITIONS = 4


def service_names(root: Path = ROOT) -> list[str]:
    """Every service of ``services/`` (a directory with a ``__main__.py``), the
    authority and the injector first (bench/soak.py starts them so)."""
    found = sorted(p.parent.name for p in (root / "services").glob("*/__main__.py"))
    return [n for n in FIRST if n in found] + [n for n in found if n not in FIRST]


class Zeitgeist:
    """``mw up``'s hooks for Zeitgeist."""

    title = "Zeitgeist"
    decoded_streams: Collection[str] = ("anomalies",)

    def __init__(self) -> None:
        self.logs_dir: Path | None = None  # the generator writes, the injector reads
        self.anomalies: list[dict[str, Any]] = []
        self.reported_at: dict[int, int] = {}  # position in anomalies -> wall ms it arrived
        self._generator: threading.Thread | None = None

    def environment(self, workdir: Path) -> dict[str, dict[str, str]]:
        self.logs_dir = workdir / "querylogs"
        # the detector's day is the scenario's compressed one
        return {
            "injector": {"MW_INJECTOR_DIR": str(self.logs_dir)},
            "dip_detector": {"MW_DETECTOR_DAY_S": str(Scenario().day_s)},
        }

    def start(self, env: Mapping[str, str], stop: threading.Event, rate: int, duration: float | None) -> None:
        assert self.logs_dir is not None, "environment() comes first"
        start_ms = (int(time.time()) + 2) * 1000
        seconds = int(duration) + 5 if duration else 86_400
        self._generator = threading.Thread(
            target=generate,
            args=(self.logs_dir, Scenario(rate=float(rate)), start_ms, seconds),
            kwargs={"stop": stop},
            daemon=True,
        )
        self._generator.start()

    def on_record(self, stream: str, value: Any, record_id: bytes) -> None:
        if stream == "anomalies":
            self.reported_at[len(self.anomalies)] = time.time_ns() // 1_000_000
            self.anomalies.append(value)

    def _truth(self) -> list[dict[str, Any]]:
        return load_truth(self.logs_dir) if self.logs_dir is not None else []

    def view_lines(self) -> list[str]:
        lines = [f"anomalies {len(self.anomalies)} (latest last):"]
        false = set(score(self._truth(), self.anomalies)["false"])
        for a in self.anomalies[-8:]:
            mark = "not scripted" if (a["kind"], a["query"], a["start"]) in false else "scripted"
            when = time.strftime("%H:%M:%S", time.localtime(a["start"] / 1000))
            lines.append(
                f"  {when} {a['kind']:<5} {a.get('phase', 'OPEN'):<5} {a['query']:<24}"
                f" expected {a['expected']:>7.1f}  observed {a['observed']:>7.1f}  {mark}"
            )
        return lines

    def summary(self, counts: Mapping[str, int], watermarks: Mapping[str, int]) -> dict[str, Any]:
        if self._generator is not None:
            self._generator.join(5)
        # Scripted anomalies count only once the detector's watermark has passed them.
        quality = score(
            self._truth(), self.anomalies, self.reported_at, until_ms=watermarks.get("dip_detector", 0)
        )
        return {
            "records_injected": counts.get("queries", 0),
            "windows_produced": counts.get("window_counts", 0),
            "anomalies_reported": quality["anomalies_reported"],  # episodes: their OPEN reports
            "scripted_detectable": quality["scripted_detectable"],
            "precision": quality["precision"],
            "recall": quality["recall"],
            "median_detection_delay_ms": quality["median_delay_ms"],
            "median_delay_from_anomaly_start_ms": quality["median_delay_from_start_ms"],
        }
