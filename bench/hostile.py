"""Hostile input against the running Zeitgeist pipeline (semantics I-12).

Run: ``.venv/bin/python bench/hostile.py [--seconds 60] [--rate 300]``.

Starts the local stack and the pipeline's services (watermark authority, injector,
windower, dip detector) with a pipeline secret (``MW_ID_SECRET``), as the compose file
does. A generator writes ``--seconds`` seconds of query logs (``--rate`` lines a second,
20 queries, each file's lines dated up to 500 ms before its second, so a window's records
come in two files) at twice the clock's pace; every tenth second is taken by hostile files
instead. Meanwhile records are written straight to the topics the services read, as
anyone who can write a topic can (see ``KINDS``): junk and forged records on
``queries``, ``window_counts`` and ``model_updates``; junk, forged and retiring records
on the watermark topic; junk, forged and oversized documents on the schemas topic; and
in the injector's directory lines nested too deep, too long, not UTF-8, out of range or
dated beyond what the broker takes, a link to a file elsewhere, and a directory.

Then it checks what a hostile record may not do:

- ``stopped_services``: services that exited (and ``unhealthy``: those running whose
  ``/healthz`` does not answer 200);
- ``lost`` / ``duplicated``: the windower's counts against the good lines written (per
  query and second, summed over its windows: records short, records counted more);
- ``early_timers``: windows whose timer fired before all their records had come (the
  window emitted again for the rest), and good records routed to ``windower.late``: a
  forged watermark does that;
- ``unaccounted``: hostile records with no trace: each one written to an input topic must
  be a dead letter naming its topic, partition and offset; each one on a control topic
  must be counted in the readers' ``mw_rejected_records_total`` with its reason; each
  hostile line or file in the injector's directory must be an injector dead letter with
  its reason;
- ``leaked``: records carrying the content of the file a link in the injector's
  directory points to.

``--without-secret`` is the negative control: the same run with no pipeline secret, where
the forged watermark is taken (every window closes early) and the check must say so.

The last line is JSON: ``kinds`` (how many kinds of hostile input were sent), the counts
above, ``hostile_records``, ``good_records``, ``windows``, per-kind ``accounted``, and
``"verdict": "contained"`` when every count is 0 (exit code 0), else ``"not contained"``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hostile_kinds import NS, Attacker, Kind, hostile_files
from mwcore.api.signing import Signer
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localproc import free_port, stop_processes
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_topic import schemas_topic
from mwcore.transport.topics import dead_letter_stream, ensure_topics, late_stream, topic_name
from mwcore.transport.watermark_topic import WatermarkFeed, watermark_topic
from services.injector.logs import file_name, record_line, write_atomically
from services.up import PARTITIONS
from testbed import wire
from testbed.hostile import rejections
from testbed.procs import wait_until
from testbed.services import service_env, start_services
from testbed.topics import read_topic

ROOT = Path(__file__).resolve().parent.parent
SECRET = "bench/hostile.py's pipeline secret"
SERVICES = ("watermark_authority", "injector", "windower", "dip_detector")
STREAMS = ("queries", "window_counts", "anomalies", "model_updates")
QUERIES = [f"query {i}" for i in range(20)]
HOSTILE_EVERY = 10  # every tenth second of the logs is a hostile one
JITTER_MS = 500  # a file's lines are dated up to this much before its second


@dataclass(eq=False)  # a thread: hashed by identity
class Generator(threading.Thread):
    """Writes the good query logs, one second of event time every ``1/speed`` s; every
    tenth second, the hostile files instead (in the seconds of ``hostile_at``)."""

    directory: Path
    start_ms: int
    seconds: int
    rate: int
    speed: float
    elsewhere: Path
    truth: Counter[tuple[str, int]] = field(default_factory=Counter)
    kinds: dict[str, Kind] = field(default_factory=dict)
    written: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        super().__init__(daemon=True, name="generator")

    def run(self) -> None:
        rng = random.Random(1)
        began = time.monotonic()
        for s in range(self.seconds):
            time.sleep(max(0.0, began + s / self.speed - time.monotonic()))
            second = self.start_ms + s * 1000
            if s % HOSTILE_EVERY == HOSTILE_EVERY - 1:
                self._hostile(s, second)
                continue
            lines = []
            for _ in range(self.rate):  # a second's records come in two files (the jitter)
                query, ts = rng.choice(QUERIES), second - JITTER_MS + rng.randrange(1000 + JITTER_MS)
                lines.append(record_line(ts, query, "en", rng.randrange(10**6)))
                self.truth[(query, ts // 1000 * 1000)] += 1
            write_atomically(self.directory / file_name(second), lines)
            self.written += len(lines)
        self.done.set()

    def _hostile(self, s: int, second: int) -> None:
        turn = s // HOSTILE_EVERY
        if turn == 0:
            self.kinds |= hostile_files(self.directory, second)
        elif turn == 1:
            (self.directory / file_name(second)).symlink_to(self.elsewhere)
            self.kinds["log file: a link to a file elsewhere"] = Kind("link", "injector", "file_refused")
        elif turn == 2:
            (self.directory / file_name(second)).mkdir()
            self.kinds["log file: a directory"] = Kind("directory", "injector", "file_refused")
        else:
            write_atomically(self.directory / file_name(second), [])  # a quiet second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60, help="seconds of event time in the logs")
    parser.add_argument("--rate", type=int, default=300, help="good lines per second of event time")
    parser.add_argument("--speed", type=float, default=2.0, help="event seconds written per wall second")
    parser.add_argument(
        "--without-secret",
        action="store_true",
        help="the negative control: no pipeline secret, so forged watermarks and ids are taken",
    )
    args = parser.parse_args()
    if args.seconds < 4 * HOSTILE_EVERY:
        parser.error(f"--seconds must be at least {4 * HOSTILE_EVERY}")
    result = run(args)
    print(json.dumps(result))
    return 0 if result["verdict"] == "contained" else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="mw-hostile-"))
    logs_dir = workdir / "querylogs"
    logs_dir.mkdir()
    elsewhere = workdir / "private.jsonl"
    elsewhere.write_text(record_line(0, "TOPSECRET", "en", 1) + "\n")
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    start_ms = (int(time.time()) - 3600) * 1000
    gen = Generator(logs_dir, start_ms, args.seconds, args.rate, args.speed, elsewhere)
    with LocalStack(workdir=workdir) as stack:
        attacker = Attacker(stack, registry)
        ensure_topics(stack.bootstrap, {topic_name(NS, s): PARTITIONS for s in STREAMS})
        ports = {name: free_port() for name in SERVICES}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        feed = WatermarkFeed(stack.bootstrap, NS, Signer(None if args.without_secret else SECRET))
        try:
            env = service_env(
                stack,
                NS,
                logs_dir,
                MW_INJECTOR_JITTER_MS=str(JITTER_MS),
                **({} if args.without_secret else {"MW_ID_SECRET": SECRET}),
            )
            own = {name: {"MW_METRICS_PORT": str(port)} for name, port in ports.items()}
            start_services(SERVICES, env, workdir, procs, own)
            both = ("windower", "dip_detector")
            wait_until(lambda: _joined(feed, both), 120, what="the windower and detector to report")
            gen.start()
            steps: list[Callable[[], None]] = [attacker.inputs, attacker.watermarks, attacker.schemas]
            for i, step in enumerate(steps):  # spread over the run's first half
                due = args.rate * (i + 1) * args.seconds // 8
                wait_until(lambda due=due: gen.written >= due, 300, what="the generator")  # type: ignore[misc]
                step()
            # read again by every reader: a record of an unknown schema makes the windower
            # and the detector read the schemas topic (and is a dead letter itself)
            attacker.inputs()
            wait_until(gen.done.is_set, args.seconds / args.speed + 120, what="the generator")
            end = start_ms + args.seconds * 1000
            write_atomically(logs_dir / file_name(end + 1000), [record_line(end + 1000, "zz-end", "en", 0)])
            write_atomically(logs_dir / file_name(end + 2000), [])
            for name in both:  # every window of the run closed, and counted
                wait_until(lambda n=name: _output(feed, n) >= end - 1, 300, what=f"{name}'s output watermark")  # type: ignore[misc]
            stopped = sorted(n for n, p in procs.items() if p.poll() is not None)
            unhealthy = sorted(n for n in SERVICES if n not in stopped and not _healthy(ports[n]))
            rejected = {
                n: rejections(ports[n], watermark_topic(NS)) + rejections(ports[n], schemas_topic(NS))
                for n in ("windower", "dip_detector")
                if n not in stopped
            }
            checked = _check(stack, registry, gen, attacker, rejected)
        finally:
            feed.close()
            stop_processes(procs.values(), 30)
    kinds = {**attacker.kinds, **gen.kinds}
    result = {
        "kinds": len(kinds),
        "hostile_records": sum(k.records for k in kinds.values()),
        "good_records": gen.written,
        **checked,
        "stopped_services": len(stopped),
        "stopped": stopped,
        "unhealthy": unhealthy,  # running, but /healthz not 200
        "logs": str(workdir),
    }
    bad = ("stopped_services", "lost", "duplicated", "early_timers", "unaccounted", "leaked")
    contained = all(result[k] == 0 for k in bad) and not unhealthy
    result["verdict"] = "contained" if contained else "not contained"
    return result


def _check(
    stack: LocalStack,
    registry: SchemaRegistry,
    gen: Generator,
    attacker: Attacker,
    rejected: dict[str, Counter[str]],
) -> dict[str, Any]:
    bootstrap = stack.bootstrap
    serde = wire.serde(stack, registry, topic_name(NS, "window_counts"), "zeitgeist.WindowCount")
    windows: dict[bytes, dict[str, Any]] = {}
    forged = {at for kind in attacker.kinds.values() for at in kind.placed}
    for m in read_topic(stack.bootstrap, topic_name(NS, "window_counts")):
        if (m.topic, m.partition, m.offset) not in forged:
            windows[m.id] = serde.decode(m.value)  # a record re-sent after a crash counts once
    got: Counter[tuple[str, int]] = Counter()
    emitted: Counter[tuple[str, int]] = Counter()
    for w in windows.values():
        got[(w["query"], w["bucket_start"])] += w["count"]
        emitted[(w["query"], w["bucket_start"])] += 1
    lost = sum(max(0, n - got[k]) for k, n in gen.truth.items())
    extra = sum(max(0, n - gen.truth[k]) for k, n in got.items() if k[0] != "zz-end")
    twice = sum(n - 1 for n in emitted.values())
    late = read_topic(bootstrap, topic_name(NS, late_stream("windower")))
    leaked = sum(
        b"TOPSECRET" in (m.value or b"")
        for stream in ("queries", dead_letter_stream("injector"))
        for m in read_topic(bootstrap, topic_name(NS, stream))
    )

    dead: dict[tuple[str, int, int], str] = {}
    injector_reasons: Counter[str] = Counter()
    for comp in ("windower", "dip_detector", "injector"):
        for m in {m.id: m for m in read_topic(bootstrap, topic_name(NS, dead_letter_stream(comp)))}.values():
            h = {k: v.decode(errors="replace") for k, v in m.headers.items()}
            if comp == "injector":
                injector_reasons[h.get("mw-reason", "")] += 1
            else:
                at = (
                    h.get("mw-source-topic", ""),
                    int(h.get("mw-source-partition", -1)),
                    int(h.get("mw-source-offset", -1)),
                )
                dead[at] = h.get("mw-reason", "")
    accounted: dict[str, str] = {}
    unaccounted = 0
    wanted_rejections: Counter[str] = Counter()
    wanted_injector: Counter[str] = Counter()
    for name, kind in {**attacker.kinds, **gen.kinds}.items():
        if kind.where == "input":
            missing = [p for p in kind.placed if p not in dead]
            unaccounted += len(missing)
            reasons = sorted({dead[p] for p in kind.placed if p in dead})
            accounted[name] = f"dead letters: {', '.join(reasons)}" + (
                f"; {len(missing)} missing" if missing else ""
            )
        elif kind.where == "control":
            wanted_rejections[kind.reason] += kind.records
            accounted[name] = f"rejected: {kind.reason}"
        else:
            wanted_injector[kind.reason] += kind.records
            accounted[name] = f"injector dead letter: {kind.reason}"
    for reader, counted in rejected.items():  # every reader rejects every control record
        short = wanted_rejections - counted
        if short:
            unaccounted += sum(short.values())
            accounted[f"({reader} did not reject)"] = json.dumps(dict(short))
    short = wanted_injector - injector_reasons
    unaccounted += sum(short.values())
    if short:
        accounted["(injector dead letters missing)"] = json.dumps(dict(short))
    return {
        "windows": len(windows),
        "lost": lost,
        "duplicated": extra,
        "early_timers": twice + len(late),
        "unaccounted": unaccounted,
        "leaked": leaked,  # lines of the file a link in the injector's directory points to
        "accounted": accounted,
        "rejections": {n: dict(c) for n, c in rejected.items()},
        "injector_dead_letters": dict(injector_reasons),
    }


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status == 200
    except OSError:  # HTTPError (503) included
        return False


def _joined(feed: WatermarkFeed, names: tuple[str, ...]) -> bool:
    feed.poll(0.2)
    return all(n in feed.latest for n in names)


def _output(feed: WatermarkFeed, name: str) -> int:
    feed.poll(0.2)
    wm = feed.latest.get(name)
    return wm.output if wm is not None else -(2**63)


if __name__ == "__main__":
    sys.exit(main())
