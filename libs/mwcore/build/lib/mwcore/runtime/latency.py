"""Commit latency of records, recorded by a worker for benchmarks."""

from __future__ import annotations

import json

import numpy as np


class LatencyRecorder:
    """Per record: commit time minus the record's timestamp, split at the moment the
    worker read it (before: producer, broker and consumer; after: the worker)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self.to_worker: list[int] = []
        self.in_worker: list[int] = []

    def add(self, now_ms: int, timestamps: list[int], arrivals: list[int]) -> None:
        self.samples.extend(now_ms - ts for ts in timestamps)
        self.to_worker.extend(a - ts for a, ts in zip(arrivals, timestamps, strict=True))
        self.in_worker.extend(now_ms - a for a in arrivals)

    def write(self, path: str) -> None:
        data = np.array(self.samples or [0])
        summary = {
            "records": len(self.samples),
            "median_ms": float(np.percentile(data, 50)),
            "p99_ms": float(np.percentile(data, 99)),
            "samples_ms": self.samples,
            "to_worker_ms": self.to_worker,
            "in_worker_ms": self.in_worker,
        }
        with open(path, "w") as fh:
            json.dump(summary, fh)
