"""The three kinds of process the kit runs, each started by ``bootstrap.start``:

- ``run_computation``: the workers of one computation (``mw run``, a service's
  ``__main__``): the computation and its rekey stages, in one loop;
- ``run_authority``: the watermark authority (``mw authority``);
- ``run_injector``: an injector process, whose source brings records in.

Each returns the exit code; configuration errors come out as one line (``main``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from mwcore.api.computation import Computation, load_computation
from mwcore.injector.injector import Injector
from mwcore.process import bootstrap, logs
from mwcore.process.observe import instrument_authority, instrument_injector, instrument_workers
from mwcore.process.plumbing import Plumbing
from mwcore.process.pool import Pool
from mwcore.process.settings import AuthoritySettings, InjectorSettings, WorkerSettings
from mwcore.process.wiring import build_authority, build_injector, build_workers
from mwcore.runtime.runner import Runner, tune_gc


def run_computation(
    computation: type[Computation[Any]] | str,
    settings: WorkerSettings | None = None,
    processes: int | None = None,
) -> int:
    """Run workers of ``computation`` (a class, or ``module:Class``) until SIGTERM;
    ``processes`` (else ``MW_PROCESSES``) > 1: that many worker processes
    (``process/pool.py``)."""

    def body() -> int:
        # the computation first: its settings classes are known by then (process/environment.py)
        cls = computation if isinstance(computation, type) else load_computation(computation)
        s = settings or WorkerSettings.load(**({} if processes is None else {"processes": processes}))
        plumbing = Plumbing.load()
        if s.processes > 1 and not plumbing.pool_child:
            name = computation if isinstance(computation, str) else f"{cls.__module__}:{cls.__qualname__}"
            logs.configure(s.log_level, s.log_format)
            return Pool(name, s.processes).run()
        process = bootstrap.start(cls.name, s)
        workers = build_workers(cls, s, plumbing)
        runner = Runner(workers, on_step=process.tick)
        if process.metrics is not None:
            instrument_workers(process.metrics, workers)
        for w in workers:
            process.add_check(w.health.problem)
        tune_gc(s.gc_threshold)
        runner.run(process.should_stop)
        return 0

    return bootstrap.main(body)


def run_authority(settings: AuthoritySettings | None = None) -> int:
    """Run the watermark authority until SIGTERM."""

    def body() -> int:
        s = settings or AuthoritySettings.load()
        process = bootstrap.start("watermark_authority", s)
        authority = build_authority(s)
        if process.metrics is not None:
            instrument_authority(process.metrics, authority)
        authority.start()
        try:
            authority.run(process.should_stop, process.tick)
        finally:
            authority.close()
        return 0

    return bootstrap.main(body)


class InjectorSource(Protocol):
    """What brings records into an injector: ``step`` sends a bounded part of what is
    there now (records, and ``advance`` promises) and says how much (0: nothing, wait
    ``idle_s``). Bounded: the loop turns between steps, and a loop that has not turned
    for ``MW_METRICS_STALL_S`` is a stall to ``/healthz``."""

    idle_s: float

    def step(self) -> int: ...


S = TypeVar("S", bound=InjectorSettings)


def run_injector(
    name: str,
    outputs: Mapping[str, str | None],
    source: Callable[[Injector, S], InjectorSource],
    settings: type[S],
) -> int:
    """Run injector process ``name`` writing ``outputs`` (stream -> Avro schema, None:
    sent encoded) with what ``source`` brings, until SIGTERM. ``settings``: the
    ``InjectorSettings`` (sub)class to read, handed to ``source`` with the injector."""

    def body() -> int:
        s = settings.load()
        process = bootstrap.start(name, s)
        injector = build_injector(name, outputs, s)
        if process.metrics is not None:
            instrument_injector(process.metrics, injector)
        injector.start()
        feed = source(injector, s)
        while not process.should_stop():
            process.tick()
            if not feed.step():
                time.sleep(feed.idle_s)
        injector.close()
        return 0

    return bootstrap.main(body, prog=name)
