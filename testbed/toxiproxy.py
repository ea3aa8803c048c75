"""Toxiproxy, the TCP proxy the fault suite's network faults go through: built once,
started on a free port, driven over its HTTP API.

This kernel has no ``tc netem`` and no netfilter, so faults on a link are made in user
space: each worker and the authority reach Redis and the broker through proxies of
their own (``testbed/chaos/links.py``), and a fault is a proxy disabled (connections
closed, new ones refused) or a toxic on it (latency, a bandwidth limit, resets, data
dropped while the connection stays up).

``fetch`` builds ``github.com/Shopify/toxiproxy/v2/cmd/server`` at ``VERSION`` with
``go install`` from the Go module proxy into a cache outside the repository
(``~/.cache/mwcore/toxiproxy-<version>``; ``make bootstrap`` runs it). The HTTP API
(https://github.com/Shopify/toxiproxy#http-api) is driven with ``requests``: the
``toxiproxy-python`` client keeps one server per process in class attributes and has
not followed the API since 2020.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import requests

from mwcore.errors import ConfigError
from mwcore.tools.stack.localproc import die_with_parent, free_port, stop_process, wait_for_port

VERSION = "2.12.0"
MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"

Stream = Literal["upstream", "downstream"]  # to the server / back to the client


def home() -> Path:
    """Where the built server is cached (shared by clones), under ``XDG_CACHE_HOME``."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mwcore" / f"toxiproxy-{VERSION}"


def binary(where: Path | None = None) -> Path:
    return (where or home()) / "bin" / "toxiproxy-server"


def fetch(where: Path | None = None, say: Callable[[str], None] = print) -> Path:
    """Build the server with ``go install`` into ``where``; a second call returns at once."""
    exe = binary(where)
    if exe.exists():
        return exe
    go = shutil.which("go")
    if go is None:
        raise ConfigError("Go is not installed (apt-get install golang-go): it builds Toxiproxy")
    say(f"Toxiproxy {VERSION}: go install {MODULE}@v{VERSION} (from the Go module proxy)")
    with tempfile.TemporaryDirectory(prefix="mw-toxiproxy-") as tmp:
        env = {**os.environ, "GOBIN": tmp, "GOFLAGS": "-mod=mod"}
        proc = subprocess.run(
            [go, "install", f"{MODULE}@v{VERSION}"], env=env, capture_output=True, text=True, timeout=900
        )
        if proc.returncode != 0:
            raise ConfigError(f"go install of Toxiproxy {VERSION} failed:\n{proc.stderr[-3000:]}")
        exe.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(Path(tmp) / "server", exe)
    say(f"Toxiproxy {VERSION}: {exe} ({exe.stat().st_size / 2**20:.0f} MiB)")
    return exe


@dataclass
class Proxy:
    """One proxy of a running server: ``listen`` (its port) in front of ``upstream``."""

    api: str
    name: str
    listen: int
    upstream: str

    def _url(self, *parts: str) -> str:
        return "/".join((self.api, "proxies", self.name, *parts))

    def enable(self, on: bool = True) -> None:
        """Off: its connections are closed and new ones refused (the link is cut)."""
        _ok(requests.post(self._url(), json={"enabled": on}, timeout=5))

    def add(self, name: str, kind: str, stream: Stream, **attributes: Any) -> None:
        """A toxic (``latency``, ``bandwidth``, ``reset_peer``, ``timeout``, ...) on one direction."""
        body = {"name": name, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes}
        _ok(requests.post(self._url("toxics"), json=body, timeout=5))

    def remove(self, name: str) -> None:
        _ok(requests.delete(self._url("toxics", name), timeout=5))

    def toxics(self) -> list[str]:
        answer = requests.get(self._url("toxics"), timeout=5)
        _ok(answer)
        return [t["name"] for t in answer.json()]


@dataclass
class ToxiproxyServer:
    """A ``toxiproxy-server`` on a free port of 127.0.0.1, with its log in a directory."""

    port: int = 0
    directory: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    proxies: dict[str, Proxy] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10) -> ToxiproxyServer:
        exe = binary()
        if not exe.exists():
            raise ConfigError(
                f"Toxiproxy {VERSION} is not built yet: run `make bootstrap` "
                "(or `python -m testbed.toxiproxy fetch`)"
            )
        self.port = self.port or free_port()
        if self.directory is None:
            self.directory = Path(tempfile.mkdtemp(prefix="mw-toxiproxy-"))
        log = open(self.directory / "toxiproxy.log", "ab")  # noqa: SIM115 - the child holds it
        self.proc = subprocess.Popen(
            [str(exe), "-host", "127.0.0.1", "-port", str(self.port)],
            stdout=log,
            stderr=log,
            preexec_fn=die_with_parent,
            env={**os.environ, "LOG_LEVEL": "warn"},
        )
        log.close()
        wait_for_port(self.port, self.proc, "toxiproxy-server", timeout)
        return self

    def proxy(self, name: str, upstream: str, listen: int = 0) -> Proxy:
        """A new proxy ``name`` on ``listen`` (a free port if 0) in front of ``upstream``."""
        port = listen or free_port()
        body = {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream, "enabled": True}
        _ok(requests.post(f"{self.api}/proxies", json=body, timeout=5))
        self.proxies[name] = Proxy(self.api, name, port, upstream)
        return self.proxies[name]

    def reset(self) -> None:
        """Every proxy enabled again, every toxic removed."""
        _ok(requests.post(f"{self.api}/reset", timeout=5))

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        stop_process(proc, 5)

    def __enter__(self) -> ToxiproxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ok(answer: requests.Response) -> None:
    if answer.status_code >= 300:
        said = f"{answer.status_code} {answer.text}"
        raise RuntimeError(f"toxiproxy: {answer.request.method} {answer.url}: {said}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m testbed.toxiproxy fetch", file=sys.stderr)
        return 2
    try:
        fetch(say=lambda line: print(f"bootstrap: {line}", flush=True))
    except ConfigError as exc:
        print(f"bootstrap: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
