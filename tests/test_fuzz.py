"""The fuzz targets (``fuzz/targets.py``), each run for a bounded time with atheris from
its committed seed corpus: only the kit's own errors may escape a decoder, and no input
may take more than 10 s or 2 GiB (``MW_TEST_FUZZ_SECONDS`` per target, 15 by default). The
negative control fuzzes the authority's unchecked decoder and must crash.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.seeds import corpus_path, seeds
from fuzz.targets import CONTROL, TARGETS
from tests.conftest import ROOT

pytestmark = [pytest.mark.fuzz, pytest.mark.hostile]

SECONDS = int(os.environ.get("MW_TEST_FUZZ_SECONDS", "15"))
FLAGS = (f"-max_total_time={SECONDS}", "-timeout=10", "-rss_limit_mb=2048", "-seed=1", "-print_final_stats=1")


def _fuzz(target: str, corpus: str, tmp_path: Path) -> tuple[int, str]:
    work = tmp_path / "corpus"
    shutil.copytree(ROOT / "fuzz" / "corpus" / corpus, work)
    done = subprocess.run(
        [sys.executable, "-m", "fuzz", target, *FLAGS, f"-artifact_prefix={tmp_path}/", str(work)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=SECONDS + 120,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_no_input_makes_a_decoder_fail_but_with_the_kit_s_own_error(target: str, tmp_path: Path) -> None:
    code, out = _fuzz(target, target, tmp_path)
    assert code == 0, out[-4000:]
    runs = re.search(r"stat::number_of_executed_units: (\d+)", out)
    assert runs is not None and int(runs.group(1)) >= 1000, out[-2000:]  # it did run


def test_the_committed_corpus_holds_every_seed() -> None:
    missing = [f"{t}/{corpus_path(t, s).name}" for t, items in seeds().items() for s in items]
    missing = [m for m in missing if not (ROOT / "fuzz" / "corpus" / m).is_file()]
    assert missing == [], f"run `python -m fuzz --seeds` and commit: {missing}"


@pytest.mark.negative_control
def test_negative_control_the_unchecked_watermark_decoder_crashes(tmp_path: Path) -> None:
    code, out = _fuzz(CONTROL.name, "watermark_record", tmp_path)
    assert code != 0 and "Uncaught Python exception" in out, out[-2000:]
    assert list(tmp_path.glob("crash-*"))  # the input that did it, kept
