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
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.api.ids import random_id
from mwcore.api.signing import Signer
from mwcore.limits import MAX_SCHEMA_BYTES
from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.tools.stack.localproc import free_port, stop_processes
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.schema_topic import schemas_topic
from mwcore.transport.topics import dead_letter_stream, ensure_topics, late_stream, topic_name
from mwcore.transport.watermark_topic import WatermarkFeed, watermark_topic
from mwcore.watermarks.published import Watermarks
from services.injector.logs import file_name, record_line, write_atomically
from services.up import PARTITIONS
from testbed.hostile import produce_raw, rejections
from testbed.topics import read_topic

ROOT = Path(__file__).resolve().parent.parent
NS = "default"
SECRET = "bench/hostile.py's pipeline secret"
SERVICES = ("watermark_authority", "injector", "windower", "dip_detector")
STREAMS = ("queries", "window_counts", "anomalies", "model_updates")
QUERIES = [f"query {i}" for i in range(20)]
HOSTILE_EVERY = 10  # every tenth second of the logs is a hostile one
JITTER_MS = 500  # a file's lines are dated up to this much before its second
FAR = 2**62


@dataclass
class Kind:
    """One kind of hostile input: how it is sent, and where it must be accounted for."""

    name: str
    where: str  # "input" (a dead letter at its offset), "control" (a rejection), "injector"
    reason: str  # the rejection's or the injector dead letter's reason ("" for input)
    records: int = 1
    placed: list[tuple[str, int, int]] = field(default_factory=list)  # input: (topic, partition, offset)


def _query_serde(registry: SchemaRegistry) -> AvroSerde:
    return AvroSerde(registry, "zeitgeist.Query")


def _wm(name: str) -> bytes:
    return Watermarks(name, "computation", FAR, FAR, FAR, FAR, 1).encode()


def _fingerprint(doc: Any) -> bytes:
    from fastavro import parse_schema
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    canonical = to_parsing_canonical_form(parse_schema(doc, named_schemas={}))
    return struct.pack("<Q", int(fingerprint(canonical, "CRC-64-AVRO"), 16))


class Attacker:
    """Writes the hostile records of ``KINDS`` to the topics, noting where each went."""

    def __init__(self, bootstrap: str, registry: SchemaRegistry) -> None:
        self.bootstrap = bootstrap
        self.registry = registry
        self.kinds: dict[str, Kind] = {}

    def _input(
        self, name: str, stream: str, records: Sequence[tuple[bytes | None, bytes | None]], **kw: Any
    ) -> None:
        topic = topic_name(NS, stream)
        placed = produce_raw(self.bootstrap, topic, records, **kw)
        kind = self.kinds.setdefault(name, Kind(name, "input", "", 0))
        kind.records += len(records)
        kind.placed += [(topic, p, o) for p, o in placed]

    def _control(self, name: str, topic: str, reason: str, key: bytes | None, value: bytes | None) -> None:
        produce_raw(self.bootstrap, topic, [(key, value)])
        self.kinds[name] = Kind(name, "control", reason)

    def inputs(self) -> None:
        """Records of ``queries``, ``window_counts`` and ``model_updates`` that no worker
        may take: each must be a dead letter."""
        q = _query_serde(self.registry)
        good = q.encode({"query": "x", "lang": "en", "user": 1, "source_file": "x.jsonl"})
        rng = random.Random(5)
        self._input("queries: junk bytes", "queries", [(b"k", rng.randbytes(40)) for _ in range(3)])
        self._input("queries: truncated Avro", "queries", [(b"k", good[: len(good) - 3])])
        self._input("queries: a key of 70,000 bytes", "queries", [(b"k" * 70_000, good)])
        self._input(
            "queries: a forged record id", "queries", [(b"x", good)], headers=[("mw-id", random_id())]
        )
        unknown = [(b"k", b"\xc3\x01" + rng.randbytes(8) + good[10:]) for _ in range(50)]
        self._input("queries: unknown writer schemas", "queries", unknown)
        counts = AvroSerde(self.registry, "zeitgeist.WindowCount").encode(
            {"query": "x", "lang": "en", "bucket_start": 0, "count": 1}
        )
        self._input("window_counts: junk bytes", "window_counts", [(b"x", counts[:12] + b"\xff" * 9)])
        other = b"\xc3\x01" + rng.randbytes(8) + counts[10:]
        self._input("window_counts: an unknown writer schema", "window_counts", [(b"x", other)])
        model = AvroSerde(self.registry, "zeitgeist.ModelUpdate").encode(
            {
                "query": "query 1",
                "period_ms": 10**15,
                "profile": [5.0] * 24,
                "trained_until": FAR,
                "version": FAR,
            }
        )
        self._input("model_updates: a model no trainer makes", "model_updates", [(b"query 1", model)])

    def watermarks(self) -> None:
        """Records of the watermark topic not signed by the authority: each reader must
        reject them (a forged one would fire every timer early; a tombstone would retire
        the windower)."""
        topic = watermark_topic(NS)
        self._control("watermarks: not JSON", topic, "bad_mac", b"windower", b"\x00garbage")
        self._control("watermarks: nested too deep", topic, "bad_mac", b"windower", b"[" * 100_000)
        self._control("watermarks: a forged tombstone", topic, "bad_mac", b"windower", None)
        self._control("watermarks: forged under another key", topic, "bad_mac", b"x", _wm("windower"))
        self._control("watermarks: forged, far ahead", topic, "bad_mac", b"windower", _wm("windower"))

    def schemas(self) -> None:
        """Documents of the schemas topic that no reader may use."""
        topic = schemas_topic(NS)
        real = self.registry.latest("zeitgeist.Query")
        forged = json.loads(json.dumps(real.document))
        forged["fields"][0]["name"], forged["fields"][1]["name"] = "lang", "query"  # the fields swapped
        key = struct.pack("<Q", real.fingerprint)
        sizeless = {
            "type": "record",
            "name": "Sizeless",
            "fields": [{"name": "a", "type": {"type": "array", "items": "null"}}],
        }
        self._control("schemas: nested too deep", topic, "not_json", b"\0" * 8, b"[" * 100_000)
        self._control("schemas: a key that is no fingerprint", topic, "bad_key", b"abc", b"{}")
        self._control(
            "schemas: forged under a real fingerprint",
            topic,
            "not_its_schema",
            key,
            json.dumps(forged).encode(),
        )
        self._control(
            "schemas: arrays of nothing",
            topic,
            "not_its_schema",
            _fingerprint(sizeless),
            json.dumps(sizeless).encode(),
        )
        oversized = b" " * (MAX_SCHEMA_BYTES + 1)
        self._control("schemas: over the size a schema may have", topic, "too_large", b"\1" * 8, oversized)


def hostile_files(directory: Path, second_ms: int, elsewhere: Path) -> dict[str, Kind]:
    """The hostile files of one hostile second, and the kinds they are (each line or file
    an injector dead letter with the reason)."""
    far_ahead = int(time.time() * 1000) + 2 * 3_600_000  # the broker refuses it
    lines = {
        "log line: nested too deep": (b'{"ts": ' * 50_000 + b"1", "malformed"),
        "log line: a user of 2**64": (record_line(second_ms, "u", "en", 2**64).encode(), "malformed"),
        "log line: not UTF-8": (
            b'{"ts": %d, "query": "caf\xe9", "lang": "fr", "user": 1}' % second_ms,
            "malformed",
        ),
        "log line: 70,000 bytes": (record_line(second_ms, "x" * 70_000, "en", 1).encode(), "malformed"),
        "log line: dated two hours ahead": (
            record_line(far_ahead, "soon", "en", 1).encode(),
            "refused_bad_timestamp",
        ),
        "log line: dated 2**62 ms": (record_line(FAR, "never", "en", 1).encode(), "bad_timestamp"),
    }
    (directory / file_name(second_ms)).write_bytes(b"".join(raw + b"\n" for raw, _ in lines.values()))
    kinds = {name: Kind(name, "injector", reason) for name, (_, reason) in lines.items()}
    return kinds


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
            self.kinds |= hostile_files(self.directory, second, self.elsewhere)
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
    attacker = Attacker("", registry)
    with LocalStack(workdir=workdir) as stack:
        attacker.bootstrap = stack.bootstrap
        ensure_topics(stack.bootstrap, {topic_name(NS, s): PARTITIONS for s in STREAMS})
        ports = {name: free_port() for name in SERVICES}
        procs: dict[str, subprocess.Popen[bytes]] = {}
        feed = WatermarkFeed(stack.bootstrap, NS, Signer(None if args.without_secret else SECRET))
        try:
            for name in SERVICES:
                env = {
                    **os.environ,
                    "MW_BOOTSTRAP": stack.bootstrap,
                    "MW_REDIS_URL": stack.redis_url,
                    "MW_NAMESPACE": NS,
                    "MW_SCHEMAS_DIR": str(ROOT / "schemas"),
                    "MW_INJECTOR_DIR": str(logs_dir),
                    "MW_INJECTOR_JITTER_MS": str(JITTER_MS),
                    **({} if args.without_secret else {"MW_ID_SECRET": SECRET}),
                    "MW_METRICS_PORT": str(ports[name]),
                    "MW_LOG_LEVEL": "warning",
                    "PYTHONPATH": str(ROOT),
                }
                with open(workdir / f"{name}.log", "wb") as log:
                    procs[name] = subprocess.Popen(
                        [sys.executable, "-m", f"services.{name}"], env=env, stdout=log, stderr=log, cwd=ROOT
                    )
            _wait(
                lambda: _joined(feed, ("windower", "dip_detector")),
                120,
                "the windower and detector to report",
            )
            gen.start()
            steps: list[Callable[[], None]] = [attacker.inputs, attacker.watermarks, attacker.schemas]
            for i, step in enumerate(steps):  # spread over the run's first half
                due = args.rate * (i + 1) * args.seconds // 8
                _wait(lambda due=due: gen.written >= due, 300, "the generator")  # type: ignore[misc]
                step()
            # read again by every reader: a record of an unknown schema makes the windower
            # and the detector read the schemas topic (and is a dead letter itself)
            attacker.inputs()
            _wait(gen.done.is_set, args.seconds / args.speed + 120, "the generator")
            end = start_ms + args.seconds * 1000
            write_atomically(logs_dir / file_name(end + 1000), [record_line(end + 1000, "zz-end", "en", 0)])
            write_atomically(logs_dir / file_name(end + 2000), [])
            _wait(lambda: _output(feed, "windower") >= end - 1, 300, "the windower's output watermark")
            _wait(lambda: _output(feed, "dip_detector") >= end - 1, 300, "the detector's output watermark")
            stopped = sorted(n for n, p in procs.items() if p.poll() is not None)
            unhealthy = sorted(n for n in SERVICES if n not in stopped and not _healthy(ports[n]))
            rejected = {
                n: rejections(ports[n], watermark_topic(NS)) + rejections(ports[n], schemas_topic(NS))
                for n in ("windower", "dip_detector")
                if n not in stopped
            }
            checked = _check(stack.bootstrap, registry, gen, attacker, rejected)
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
    bootstrap: str,
    registry: SchemaRegistry,
    gen: Generator,
    attacker: Attacker,
    rejected: dict[str, Counter[str]],
) -> dict[str, Any]:
    serde = AvroSerde(registry, "zeitgeist.WindowCount")
    windows: dict[bytes, dict[str, Any]] = {}
    forged = {at for kind in attacker.kinds.values() for at in kind.placed}
    for m in read_topic(bootstrap, topic_name(NS, "window_counts")):
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


def _wait(cond: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
