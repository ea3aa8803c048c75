"""The container fixtures' plugin (``mwcore.testing.containers``) without a Docker engine:
a test using one is skipped with one clear reason; the plugin's import loads neither
testcontainers nor the Kafka and Redis clients (it loads into every pytest run of a
project that installs ``mwcore[testing]``); its scope option is checked.

On a real engine: ``tests/test_containers.py``."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest_plugins = ["pytester"]

USES_KAFKA = """
def test_uses_kafka(mw_kafka):
    raise AssertionError("ran without an engine")
"""


def test_without_an_engine_a_test_using_the_fixtures_is_skipped_with_the_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    pytester.makepyfile(USES_KAFKA)
    result = pytester.runpytest_subprocess("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED*no Docker engine answers at unix:///nonexistent/docker.sock: start dockerd*DOCKER_HOST*"]
    )


def test_the_scope_option_is_checked(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nmw_containers_scope = forever\n")
    pytester.makepyfile(USES_KAFKA)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*mw_containers_scope = 'forever': one of session, package, module*"])


def test_the_plugin_imports_nothing_heavy() -> None:
    heavy = ["testcontainers", "docker", "confluent_kafka", "redis", "mwcore.runtime", "mwcore.transport"]
    code = f"import sys, mwcore.testing.containers; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
