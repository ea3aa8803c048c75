"""Test plumbing: what tests, benchmarks and the kit's own supervisor set in a worker
process, read apart from the settings (it is no part of the public surface: the table of
settings in docs/operating.md leaves it out).

- ``MW_FAULTS`` / ``MW_FAULT_LOG``: fault injection for the crash and zombie tests
  (``runtime/faults.py``: ``point:kill|stop:probability[:once][:after=N]``, comma-separated)
  / the file each firing is logged to;
- ``MW_LATENCY_OUT``: a file to write, at exit, the commit latency of every record
  (``bench/throughput.py``);
- ``MW_OVERLAP_TRANSACTIONS``: ``0`` or ``1``, the worker's transactions waited for or
  sent on each interval's lane while its loop goes on (``Tuning.overlap_transactions``; benchmarks
  compare the two);
- ``MW_POOL_CHILD``: set by a worker pool in its children (``pool.py``): they run as
  plain workers;
- ``MW_PANIC_KEY``: the native core panics in its per-record code on the records of
  this key (the test of a panic's containment, ``tests/test_hostile_inputs.py``).
"""

from __future__ import annotations

from typing import Self

from pydantic_settings import BaseSettings, SettingsConfigDict

from mwcore.process.environment import load_settings
from mwcore.runtime.config import Tuning
from mwcore.runtime.faults import Faults


class Plumbing(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MW_", extra="ignore", frozen=True)

    faults: str = ""
    fault_log: str = ""
    latency_out: str = ""
    overlap_transactions: bool | None = None  # (None: the runtime's default)
    pool_child: bool = False
    panic_key: str = ""

    @classmethod
    def load(cls) -> Self:
        return load_settings(cls)

    def fault_points(self) -> Faults:
        return Faults(self.faults, self.fault_log)

    def tuning(self) -> Tuning:
        if self.overlap_transactions is None:
            return Tuning(latency_out=self.latency_out)
        return Tuning(latency_out=self.latency_out, overlap_transactions=self.overlap_transactions)
