"""Commit latency of records, recorded by a worker for benchmarks."""

from __future__ import annotations

import json

import numpy as np


class LatencyRecorder:
    """Commit latency of every record: commit time minus the record's timestamp."""

    def __init__(self) -> None:
        self.samples: list[int] = []

    def add(self, now_ms: int, timestamps: list[int]) -> None:
        self.samples.extend(now_ms - ts for ts in timestamps)

    def write(self, path: str) -> None:
        data = np.array(self.samples or [0])
        summary = {
            "records": len(self.samples),
            "median_ms": float(np.percentile(data, 50)),
            "p99_ms": float(np.percentile(data, 99)),
            "samples_ms": self.samples,
        }
        with open(path, "w") as fh:
            json.dump(summary, fh)
