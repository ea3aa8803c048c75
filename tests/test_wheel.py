"""``make wheel``: the two wheels install into a fresh virtualenv from binaries only (no
compiler, no Rust on the PATH) and run the library's example on the native core:
``mw up`` outside a project, with ``MW_CORE=native``, every injected record committed
and no service stopped; and without the core installed, a worker asked for it stops at
start with one line.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("cargo") is None, reason="no Rust toolchain: no native core to build"),
]


@pytest.mark.slow
def test_the_wheels_install_without_rust_and_run_the_example_on_the_native_core(tmp_path: Path) -> None:
    subprocess.run(["make", "wheel"], cwd=ROOT, check=True, capture_output=True, timeout=600)
    wheels = sorted(str(p) for p in (ROOT / "dist").glob("*.whl"))
    assert [Path(w).name.split("-")[0] for w in wheels] == ["mwcore", "mwcore_native"], wheels
    assert "-abi3-" in wheels[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # Nothing from source: every package a binary wheel, with no cargo or compiler to find.
    bare_path = os.pathsep.join([str(venv / "bin"), "/usr/bin", "/bin"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MW_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = bare_path
    assert shutil.which("cargo", path=bare_path) is None
    subprocess.run(
        [str(venv / "bin/pip"), "install", "-q", "--only-binary", ":all:", *wheels],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    done = subprocess.run(
        [str(venv / "bin/mw"), "up", "--duration", "15"],
        cwd=run_dir,
        env={**env, "MW_CORE": "native"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["exited"] == [], summary["exited"]
    assert summary["records_injected"] > 5_000
    assert summary["records_committed"] == summary["records_injected"], summary
    # A worker asked for a core that is not there stops at start with one line (so the
    # workers above, which committed everything, ran on it).
    subprocess.run([str(venv / "bin/pip"), "uninstall", "-q", "-y", "mwcore-native"], env=env, check=True)
    refused = subprocess.run(
        [str(venv / "bin/mw"), "run", "mwcore.examples.running_sum:RunningSum"],
        cwd=run_dir,
        env={
            **env,
            "MW_CORE": "native",
            "MW_BOOTSTRAP": "127.0.0.1:1",
            "MW_REDIS_URL": "redis://127.0.0.1:1/0",
            "MW_SCHEMAS_DIR": str(run_dir),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr
    assert lines[0].startswith("mw: configuration error: MW_CORE=native: the native core is not installed")
