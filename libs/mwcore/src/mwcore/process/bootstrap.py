"""How every process of the kit starts and stops: ``mw run``, ``mw authority`` and
injectors all begin here.

``start`` does, in order:

1. logging, configured from the settings (read once, at the process's edge);
2. preflight: Redis and the broker reachable and fit (a ``ConfigError`` naming the
   setting to fix; a store that can lose acknowledged writes is refused where the
   process keeps state in it);
3. metrics and ``/healthz``, served when ``MW_METRICS_PORT`` is set;
4. the probe of Redis and the broker (``reachability.py``), every ``MW_REACH_EVERY_MS``;
5. SIGTERM and SIGINT ask the process to stop: its loop drains and returns.

``main`` runs a process's body and turns the kit's errors into one line on stderr and
exit code 2, without a traceback; Redis or the broker lost mid-run, past the clients'
retries, into one line and exit code 75; a panic of the native core outside its per-record code
(a bug of the kit's) into one line and exit code 70.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from types import FrameType

import structlog

from mwcore.cores import is_panic
from mwcore.errors import ConfigError, RefusedError, StoreRollbackError
from mwcore.process import logs
from mwcore.process.metrics import ProcessMetrics
from mwcore.process.observe import instrument_rejections
from mwcore.process.reachability import Probe, broker_dependency, redis_dependency
from mwcore.process.settings import MetricsSettings, ProcessSettings
from mwcore.store.client import lost_redis
from mwcore.store.preflight import check_redis
from mwcore.transport.preflight import check_kafka
from mwcore.transport.transient import lost_broker

log = structlog.get_logger("mwcore.process")

# (EX_TEMPFAIL) Redis or the broker stopped answering mid-run, past the clients' retries:
# nothing is lost (the intervals move to other workers, or wait); start it again
LOST = 75
AGAIN = "start it again once it answers (a supervisor does)"
PANICKED = 70  # (EX_SOFTWARE) a panic of the native core outside its per-record code: a bug


class Process:
    """A started process: whether it was asked to stop, and its metrics if served."""

    def __init__(self, name: str, metrics: ProcessMetrics | None, probe: Probe | None = None) -> None:
        self.name = name
        self.metrics = metrics
        self.probe = probe  # whether Redis and the broker answer (reachability.py)
        self.stopping = False
        if metrics is not None and probe is not None:
            metrics.liveness.checks.append(probe.problem)
            metrics.collect_with(probe.families)

    def should_stop(self) -> bool:
        return self.stopping

    def stop(self) -> None:
        self.stopping = True

    def tick(self) -> None:
        """The loop turned (what ``/healthz`` watches for a hung loop)."""
        if self.metrics is not None:
            self.metrics.liveness.tick()

    def add_check(self, check: Callable[[], str | None]) -> None:
        """A reason the process is not doing its job, or None (``/healthz``)."""
        if self.metrics is not None:
            self.metrics.liveness.checks.append(check)


def start(name: str, settings: ProcessSettings) -> Process:
    """Configure logging, check the dependencies, serve metrics, handle signals."""
    logs.configure(settings.log_level, settings.log_format)
    if settings.unsafe.active():  # never in a deployment (mwcore/controls.py)
        log.warning("negative_controls_on", process=name, switches=settings.unsafe.active())
    preflight(settings.bootstrap, settings.redis_url, durable=settings.durable_store())
    process = Process(name, serve_metrics(settings), start_probe(name, settings))

    def _stop(signum: int, frame: FrameType | None) -> None:
        process.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    return process


def preflight(bootstrap: str, redis_url: str | None = None, *, durable: bool = False) -> None:
    """Stop at start, with one line (``ConfigError``), when the broker or Redis cannot be
    used; ``durable``: also when Redis can lose acknowledged writes."""
    if redis_url is not None:
        check_redis(redis_url, durable=durable)
    check_kafka(bootstrap)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def start_probe(name: str, settings: ProcessSettings) -> Probe | None:
    """Ask Redis and the broker every ``MW_REACH_EVERY_MS`` whether they answer."""
    if settings.reach_every_ms == 0:
        return None
    deps = [redis_dependency(settings.redis_url), broker_dependency(settings.bootstrap)]
    return Probe(name, deps, every_s=settings.reach_every_ms / 1000).start()


def serve_metrics(settings: MetricsSettings) -> ProcessMetrics | None:
    """Serve /metrics and /healthz if MW_METRICS_PORT is set."""
    if settings.metrics_port is None:
        return None
    metrics = ProcessMetrics(settings.metrics_stall_s)
    instrument_rejections(metrics)
    port = metrics.serve(settings.metrics_port, settings.metrics_host)
    log.info("metrics", url=f"http://{settings.metrics_host}:{port}/metrics")
    return metrics


def main(body: Callable[[], int], prog: str = "mw", command: str = "") -> int:
    """Run ``body``; the kit's errors become one line on stderr and exit code 2
    (``command``, for an operator's command: named in a refusal)."""
    try:
        return body()
    except ConfigError as exc:
        print(f"{prog}: configuration error: {exc}", file=sys.stderr)
    except StoreRollbackError as exc:
        print(f"{prog}: stopped: {exc}", file=sys.stderr)
    except RefusedError as exc:
        print(f"{prog}{' ' + command if command else ''}: refused: {exc}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BaseException as exc:
        lost = "Redis" if lost_redis(exc) else "the Kafka broker" if lost_broker(exc) else None
        if lost is not None:
            print(f"{prog}: stopped: lost {lost} ({_one_line(exc)}); {AGAIN}", file=sys.stderr)
            return LOST
        if not is_panic(exc):
            raise
        print(f"{prog}: stopped: a bug in the native core (its panic is above): {exc}", file=sys.stderr)
        return PANICKED
    return 2
