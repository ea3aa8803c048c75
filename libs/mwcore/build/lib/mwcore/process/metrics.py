"""Prometheus metrics of one process, served with a liveness check.

Counters are read from the runtime's own counters when Prometheus scrapes (nothing is
added to the per-record path); batch and commit latencies are histograms observed once
per commit. ``GET /metrics`` serves the text format, ``GET /healthz`` answers 200 while
the process's loop is turning and its checks (``Liveness.checks``: a worker's are in
``health.py``) find nothing wrong, and 503 with the reason otherwise (the health check
of the compose file and of an orchestrator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mwcore.errors import ConfigError

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
STALL_S = 60.0  # a loop that has not turned for this long is unhealthy (MW_METRICS_STALL_S)


class Liveness:
    """When the process's loop last turned, and what else says it is not doing its job."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self.beat = time.monotonic()
        self.checks: list[Callable[[], str | None]] = []  # each: a reason, or None

    def tick(self) -> None:
        self.beat = time.monotonic()

    def problem(self) -> str | None:
        stalled = time.monotonic() - self.beat
        if stalled >= self.stall_s:
            return f"stalled: the loop has not turned for {stalled:.0f} s"
        for check in self.checks:
            reason = check()
            if reason:
                return reason
        return None

    def healthy(self) -> bool:
        return self.problem() is None


class FamiliesCollector(Collector):
    """A collector whose metric families a function builds at scrape time."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())


def counter(name: str, doc: str, labels: dict[str, str], value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    family.add_metric(list(labels.values()), value)
    return family


def merge(families: Iterable[Metric]) -> list[Metric]:
    """One family per name (several workers of a process each give samples)."""
    by_name: dict[str, Metric] = {}
    for f in families:
        if f.name in by_name:
            by_name[f.name].samples.extend(f.samples)
        else:
            by_name[f.name] = f
    return list(by_name.values())


MAX_CONNECTIONS = 8
REQUEST_TIMEOUT_S = 5.0


class _BoundedServer(ThreadingHTTPServer):
    """A thread per connection, at most ``MAX_CONNECTIONS`` at once."""

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # busy: the client may try again
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class ProcessMetrics:
    """The metrics registry of one process and the HTTP server that exposes it."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.registry = CollectorRegistry()
        self.liveness = Liveness(stall_s)
        self._server: ThreadingHTTPServer | None = None

    def histogram(self, name: str, doc: str, labels: tuple[str, ...]) -> Histogram:
        return Histogram(name, doc, labels, registry=self.registry, buckets=LATENCY_BUCKETS)

    def collect_with(self, families: Callable[[], Iterable[Metric]]) -> None:
        self.registry.register(FamiliesCollector(lambda: merge(families())))

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Listen on ``host:port`` (0: any free port) in a daemon thread; the port. At
        most ``MAX_CONNECTIONS`` are served at once (more are closed at once), each for
        at most ``REQUEST_TIMEOUT_S``: a flood of connections costs a few threads."""
        registry, liveness = self.registry, self.liveness

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._answer(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                elif path == "/healthz":
                    problem = liveness.problem()
                    body = b"ok\n" if problem is None else problem.encode() + b"\n"
                    self._answer(200 if problem is None else 503, "text/plain", body)
                else:
                    self._answer(404, "text/plain", b"try /metrics or /healthz\n")

            def _answer(self, status: int, ctype: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # scrapes are not worth a log line

        try:
            self._server = _BoundedServer((host, port), Handler)
        except OSError as exc:
            raise ConfigError(f"MW_METRICS_PORT={port}: cannot listen on {host}:{port} ({exc})") from None
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True).start()
        return int(self._server.server_address[1])

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
