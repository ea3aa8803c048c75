"""The Zeitgeist services as separate processes on a local stack, as ``mw up`` starts
them: for the benchmarks and tests that run the whole pipeline."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from mwcore.tools.stack.localstack import LocalStack
from testbed import wire
from testbed.procs import for_service

ROOT = Path(__file__).resolve().parent.parent


def service_env(stack: LocalStack, namespace: str, injector_dir: Path, **extra: str) -> dict[str, str]:
    """The settings every service of the pipeline gets (``extra`` added or replacing)."""
    return {
        **os.environ,
        "MW_BOOTSTRAP": stack.bootstrap,
        "MW_REDIS_URL": stack.redis_url,
        "MW_NAMESPACE": namespace,
        "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
        **wire.registry_env(stack),
        "MW_INJECTOR_DIR": str(injector_dir),
        "MW_LOG_LEVEL": "warning",
        "PYTHONPATH": str(ROOT),
        **extra,
    }


def start_services(
    names: Iterable[str],
    env: Mapping[str, str],
    workdir: Path,
    procs: dict[str, subprocess.Popen[bytes]],
    own: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Start ``python -m services.<name>`` for each name, its output in
    ``<workdir>/<name>.log``, with ``env`` (less the other services' own settings) and
    its ``own`` settings; into ``procs``, so
    that what started is stopped even if a later one fails."""
    for name in names:
        with open(workdir / f"{name}.log", "wb") as log:
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", f"services.{name}"],
                env={**for_service(name, env), **(own or {}).get(name, {})},
                stdout=log,
                stderr=log,
                cwd=ROOT,
            )
