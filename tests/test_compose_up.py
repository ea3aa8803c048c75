"""``docker compose up`` of the Zeitgeist services, for real: docker-compose.yml on a
Docker engine (started here if none answers), with the images ``make images`` builds
from packages (``testbed/images.py``).

On one project, the generator writing the default scenario in real time:

1. ``up -d``: every service comes up healthy, and the scripted anomalies (a spike at
   40 s, a language going silent at 80 s) are found: precision and recall 1.0, read
   from the ``anomalies`` topic, against the truth the generator wrote;
2. ``kill windower`` in the middle of the run, then ``up -d windower``: every window
   count exact (nothing lost, nothing twice), against the query logs;
3. ``restart redis`` in the middle of a run: the same exactness (the checkpoints are
   in Redis's append-only file, on its volume).

On projects of their own: 4. ``down -v`` leaves no container, network or volume;
5. an image built again leaves no replaced image behind.

The ``three-brokers`` profile with a broker killed and brought back is a long run of its
own (six minutes on this two-core host, three JVM brokers beside the registry's and the
services): ``bench/compose_brokers.py``. Here, ``tests/test_compose.py`` checks the
profile is a replicated cluster every service is told of, and ``tests/test_kafka_cluster.py``
SIGKILLs a broker of three under load on the local stack.

What the pipeline wrote is read from inside the project's network
(``testbed/compose_probe.py``); the logs and the truth are copied out of the
generator's volume.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.injector.truth import load_truth, score
from testbed import images
from testbed.compose_project import (
    ComposeProject,
    exact_counts,
    output_watermark,
    project,
    running_from,
)

pytestmark = [pytest.mark.compose]


@pytest.fixture(scope="module")
def zeitgeist(docker: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeProject]:
    with project(tmp_path_factory.mktemp("zeitgeist")) as p:
        yield p


def once(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The values, each id once (a production re-sent after a crash keeps its id)."""
    return list({r["id"]: r["value"] for r in records}.values())


def test_up_every_service_healthy_and_the_scripted_anomalies_found(zeitgeist: ComposeProject) -> None:
    assert zeitgeist.unhealthy() == []
    first = zeitgeist.first_second()
    got = zeitgeist.wait_output("dip_detector", first + 100_000, 300)  # past the dip at 80 s
    truth = load_truth(zeitgeist.logs_dir())
    quality = score(truth, once(got["anomalies"]), until_ms=output_watermark(got, "dip_detector"))
    print(f"compose: detection {quality}")
    assert quality["scripted_detectable"] >= 3, quality  # the spike and the dip's queries
    assert quality["precision"] == 1.0 and quality["recall"] == 1.0, quality
    assert zeitgeist.unhealthy() == []


def test_a_windower_killed_mid_run_loses_and_repeats_no_window(zeitgeist: ComposeProject) -> None:
    at = running_from(zeitgeist, 20)
    zeitgeist.compose("kill", "windower")
    time.sleep(2)
    zeitgeist.up("windower")
    got = zeitgeist.wait_output("windower", at + 20_000, 240)
    assert exact_counts(zeitgeist, got, output_watermark(got, "windower") - 1000) == []


def test_redis_restarted_mid_run_loses_and_repeats_no_window(zeitgeist: ComposeProject) -> None:
    at = running_from(zeitgeist, 20)
    zeitgeist.compose("restart", "redis")
    zeitgeist.up()  # every service healthy again (those that lost Redis restarted)
    got = zeitgeist.wait_output("windower", at + 20_000, 240)
    assert exact_counts(zeitgeist, got, output_watermark(got, "windower") - 1000) == []
    assert zeitgeist.unhealthy() == []


def test_down_v_leaves_no_container_network_or_volume(docker: None, tmp_path: Path) -> None:
    p = ComposeProject(tmp_path)
    try:
        p.up("kafka", "redis")
        there = p.leftovers()
        kinds = {x.split()[0] for x in there}
        assert kinds == {"ps", "network", "volume"}, there
    finally:
        p.down()
    assert p.leftovers() == []


def test_an_image_built_again_leaves_no_replaced_image(docker: None, tmp_path: Path) -> None:
    """``make images`` after a change: the image it replaced is removed, not left to fill
    the disk one rebuild at a time (vfs keeps a full copy per layer)."""
    (tmp_path / "Dockerfile").write_text(f'FROM {images.BASE}\nCMD ["true"]\n')
    tag = f"mwtest/replaced:{tmp_path.name[-8:].lower()}"
    try:
        images.build(tag, tmp_path, "inputs-1")
        first = images.image_id(tag)
        images.build(tag, tmp_path, "inputs-2")
        second = images.image_id(tag)
        assert first is not None and second is not None and first != second
        assert images.image_id(first) is None, "the replaced image is still there"
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
