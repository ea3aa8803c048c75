"""Running a computation on the containers of ``mwcore.testing.containers``: what its
``mw_run`` fixture is. ``mw_run(computation, inputs, ...)`` (``RunOnContainers``) runs
``python -m mwcore run`` of the computation on them, in a namespace of its own, and
returns a ``Run``: its outputs decoded, per stream (``RunOnContainers.__call__`` says
how).

Loaded with the plugin, so it imports only the standard library at load; the kit's
runtime, transport and serde are imported inside the calls.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from mwcore.api.computation import Computation
    from mwcore.runtime.harness import Produced
    from mwcore.serde.avro import SchemaRegistry
    from mwcore.serde.typed import Typed


class _Broker(Protocol):
    @property
    def bootstrap(self) -> str: ...


class _Service(Protocol):
    @property
    def url(self) -> str: ...


class _Containers(Protocol):
    """What a run needs of ``mwcore.testing.containers.Containers`` (not imported: that
    module imports this one)."""

    @property
    def kafka(self) -> _Broker: ...
    @property
    def redis(self) -> _Service: ...
    @property
    def schema_registry(self) -> _Service: ...


# an input record: (key, value) or (key, value, timestamp in ms)
Send = tuple[str, Any] | tuple[str, Any, int]
# inherited MW_* variables a worker of mw_run keeps; it is given its own addresses and namespace
_INHERITED = ("MW_CORE", "MW_LOG_", "MW_UNSAFE_", "MW_KAFKA_", "MW_TEST_")


@dataclass(frozen=True)
class Run:
    """What ``mw_run`` ran: the outputs decoded, as ``Harness`` gives them (dicts, or
    the output's declared type; each stream's records by partition, in the order
    produced: each key's in order), the namespace, and the worker's log."""

    computation: str
    namespace: str
    outputs: Mapping[str, list[Produced]]
    log: str

    def output(self, stream: str) -> list[Produced]:
        if stream not in self.outputs:
            raise KeyError(f"{stream!r} is not an output of {self.computation}")
        return self.outputs[stream]

    def values(self, stream: str) -> list[Any]:
        return [p.value for p in self.output(stream)]


class RunOnContainers:
    """``mw_run``: runs computations on the containers, one namespace per run."""

    def __init__(self, containers: _Containers, workdir: Path) -> None:
        self.containers = containers
        self.workdir = workdir

    def __call__(
        self,
        computation: type[Computation[Any]] | str,
        inputs: Mapping[str, Iterable[Send]],
        *,
        expect: Mapping[str, int] | None = None,
        finish: bool = True,
        schemas: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        quiet_s: float = 1.0,
    ) -> Run:
        """Run ``computation`` (a class, or ``"module:Class"``) as ``python -m mwcore run``
        against the containers, in a namespace of its own, fed ``inputs``; its outputs,
        decoded, once it is done.

        ``inputs``: stream -> records, each ``(key, value)`` or ``(key, value,
        timestamp)`` (a dict, or the input's declared type; the timestamp in ms, else the
        record's position in its list, from 1), written in the
        kit's framing (``MW_WIRE``, else Confluent's, the schema registered in the
        registry) after the worker has made its topics.

        Done means: the worker has committed every input record, then (with ``finish``)
        its input watermark is set to the end of time, so its event-time timers fire as
        at the end of input (``MW_WATERMARK=redis``), then no output has grown for
        ``quiet_s`` and each stream of ``expect`` (stream -> records) holds that many.
        The worker is stopped (SIGTERM: it drains) and the outputs read. ``TimeoutError``
        after ``timeout`` s, with what was missing and the worker's log; a worker that
        stops by itself is an error with its log.

        ``schemas``: the Avro schemas' directory (else the project's ``schemas/``, found
        from the current directory up); ``env``: more settings of the worker (``MW_*``).
        The worker finds modules where this process does (its ``sys.path``)."""
        from mwcore.api.computation import load_computation
        from mwcore.serde.avro import find_schemas

        if isinstance(computation, str):
            target, cls = computation, load_computation(computation)
        else:
            target, cls = f"{computation.__module__}:{computation.__qualname__}", computation
        declared = {i.stream for i in cls.inputs}
        unknown = sorted(set(inputs) - declared)
        if unknown:
            raise ValueError(
                f"{cls.name} reads no stream {', '.join(unknown)} (its inputs: {sorted(declared)})"
            )
        if expect:
            outputs = {o.stream for o in cls.outputs}
            if set(expect) - outputs:
                raise ValueError(f"{cls.name} produces no stream {', '.join(sorted(set(expect) - outputs))}")
        schemas_dir = Path(schemas) if schemas is not None else find_schemas()
        namespace = f"t{uuid.uuid4().hex[:12]}"
        worker = _Worker(self.containers, cls, target, namespace, schemas_dir, env or {}, self.workdir)
        deadline = time.monotonic() + timeout
        try:
            worker.start(deadline)
            worker.write(inputs)
            worker.wait_consumed(deadline)
            if finish:
                worker.finish()
            worker.wait_done(dict(expect or {}), quiet_s, deadline)
        finally:
            worker.stop()
        return Run(target, namespace, worker.read_outputs(), worker.log_text())


class _Worker:
    """One ``mw_run``: the worker process, and what it reads and writes."""

    def __init__(
        self,
        containers: _Containers,
        cls: type[Computation[Any]],
        target: str,
        namespace: str,
        schemas_dir: Path,
        env: Mapping[str, str],
        workdir: Path,
    ) -> None:
        from mwcore.serde.framing import DEFAULT_WIRE, check_wire
        from mwcore.transport.topics import topic_name

        self.containers = containers
        self.bootstrap = containers.kafka.bootstrap
        self.cls = cls
        self.target = target
        self.namespace = namespace
        self.schemas_dir = schemas_dir
        self.log = workdir / f"{cls.name}-{namespace}.log"
        inherited = {
            k: v
            for k, v in os.environ.items()
            if not k.upper().startswith("MW_") or k.upper().startswith(_INHERITED)
        }
        self.env = {
            **inherited,
            "MW_BOOTSTRAP": self.bootstrap,
            "MW_REDIS_URL": containers.redis.url,
            "MW_SCHEMA_REGISTRY_URL": containers.schema_registry.url,
            "MW_SCHEMAS_DIR": str(schemas_dir),
            "MW_NAMESPACE": namespace,
            "MW_WATERMARK": "redis",  # set here: the end of time once the input is in (finish)
            "MW_WORKER_ID": f"mw-run-{namespace}",
            "PYTHONPATH": os.pathsep.join(p or os.getcwd() for p in sys.path if isinstance(p, str)),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.wire = check_wire(self.env.get("MW_WIRE") or DEFAULT_WIRE, "MW_WIRE")
        self.input_topics = {i.stream: topic_name(namespace, i.stream) for i in cls.inputs}
        self.output_topics = {o.stream: topic_name(namespace, o.stream) for o in cls.outputs}
        self.proc: subprocess.Popen[bytes] | None = None
        self._registry: SchemaRegistry | None = None
        self._types: dict[str, Typed] | None = None

    # -- the process

    def start(self, deadline: float) -> None:
        from mwcore.transport.topics import partition_counts

        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mwcore", "run", self.target],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=os.getcwd(),
            )
        topics = [*self.input_topics.values(), *self.output_topics.values()]
        self._until(
            lambda: len(partition_counts(self.bootstrap, topics)) == len(set(topics)), deadline, "its topics"
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def _until(
        self, done: Callable[[], bool], deadline: float, what: str, missing: Callable[[], str] = str
    ) -> None:
        while not done():
            if not self.alive():
                code = None if self.proc is None else self.proc.returncode
                raise RuntimeError(
                    f"the worker of {self.target} stopped (exit code {code}) while waiting for {what}; "
                    f"its log:\n{self._tail()}"
                )
            if time.monotonic() > deadline:
                detail = missing()
                raise TimeoutError(
                    f"mw_run of {self.target}: no {what} in time{': ' + detail if detail else ''}; "
                    f"the worker's log:\n{self._tail()}"
                )
            time.sleep(0.2)

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    # -- schemas

    def registry(self) -> SchemaRegistry:
        """The schemas directory, with writer schemas learnt by id from the registry."""
        if self._registry is None:
            from mwcore.serde.avro import SchemaRegistry
            from mwcore.transport.schema_registry import RegistryAccess, RegistryClient

            self._registry = SchemaRegistry.from_directory(self.schemas_dir)
            self._registry.use_ids(RegistryClient(RegistryAccess(self.containers.schema_registry.url)))
        return self._registry

    def types(self) -> dict[str, Typed]:
        """stream -> its declared type (``Input``/``Output(type=...)``) and converters."""
        if self._types is None:
            from mwcore.runtime.layout import stream_types

            self._types = stream_types(self.cls, self.registry())
        return self._types

    # -- input

    def write(self, inputs: Mapping[str, Iterable[Send]]) -> None:
        from mwcore.api.signing import UNSIGNED, Signer
        from mwcore.serde.typed import plain
        from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
        from mwcore.transport.writer import SourceWriter

        secret = self.env.get("MW_ID_SECRET")
        signer = Signer(secret, cast(Any, self.env.get("MW_MAC_V1") or "off")) if secret else UNSIGNED
        client = RegistryClient(RegistryAccess(self.containers.schema_registry.url))
        try:
            for inp in self.cls.inputs:
                records = list(inputs.get(inp.stream, ()))
                if not records:
                    continue
                if inp.schema is None:
                    raise ValueError(f"input {inp.stream} of {self.cls.name} declares no schema")
                writer = SourceWriter(
                    self.bootstrap,
                    self.registry(),
                    self.input_topics[inp.stream],
                    inp.schema,
                    wire=inp.wire or self.wire,
                    schema_registry=client,
                    signer=signer,
                )
                declared = self.types().get(inp.stream)
                for position, record in enumerate(records, start=1):
                    key, value, timestamp = _record(inp.stream, record, position)
                    writer.write(key, plain(value) if declared is None else declared.write(value), timestamp)
                writer.flush()
        finally:
            client.close()

    def wait_consumed(self, deadline: float) -> None:
        """Until the worker has committed every record of its inputs (those read as they
        are keyed; a re-keyed input is waited for by the outputs' quiet)."""
        from mwcore.transport.topics import committed_offsets, end_offsets, partition_counts

        direct = [self.input_topics[i.stream] for i in self.cls.inputs if i.key is None]
        counts = partition_counts(self.bootstrap, direct)
        ends = {tp: end for tp, end in end_offsets(self.bootstrap, counts).items() if end > 0}
        group = _group(self.namespace, self.cls.name)
        left: dict[tuple[str, int], int] = dict(ends)

        def consumed() -> bool:
            got = committed_offsets(self.bootstrap, group, counts)
            for tp, end in list(left.items()):
                if got.get(tp, -1) >= end:
                    del left[tp]
            return not left

        self._until(
            consumed, deadline, "commit of its input", lambda: f"partitions not through: {sorted(left)}"
        )

    def finish(self) -> None:
        """The computation's input watermark at the end of time: its event-time timers fire."""
        from mwcore.api.clock import MAX_WATERMARK
        from mwcore.store.client import redis_client

        client = redis_client(self.containers.redis.url)
        try:
            client.set(f"mw:wm:{self.namespace}:{self.cls.name}", MAX_WATERMARK)
        finally:
            client.close()

    # -- output

    def _ends(self) -> dict[tuple[str, int], int]:
        from mwcore.transport.topics import end_offsets, partition_counts

        counts = partition_counts(self.bootstrap, list(self.output_topics.values()))
        return end_offsets(self.bootstrap, counts)

    def wait_done(self, expect: dict[str, int], quiet_s: float, deadline: float) -> None:
        """Until no output has grown for ``quiet_s`` and each stream of ``expect`` holds
        that many records."""
        ends = self._ends()
        changed = time.monotonic()
        counted: dict[str, int] = {}
        stale = True

        def done() -> bool:
            nonlocal ends, changed, counted, stale
            now = self._ends()
            if now != ends:
                ends, changed, stale = now, time.monotonic(), True
            if expect and stale:
                counted = {s: len(v) for s, v in self.read_outputs(list(expect)).items()}
                stale = False
            enough = all(counted.get(s, 0) >= n for s, n in expect.items())
            return enough and time.monotonic() - changed >= quiet_s

        def missing() -> str:
            short = [f"{s}: {counted.get(s, 0)} of {n}" for s, n in expect.items() if counted.get(s, 0) < n]
            return ", ".join(short) or f"outputs still growing within {quiet_s} s"

        self._until(done, deadline, "end of its output", missing)

    def read_outputs(self, streams: list[str] | None = None) -> dict[str, list[Produced]]:
        """The output streams decoded (each production once: a re-sent one has its id)."""
        from mwcore.api.headers import is_reserved
        from mwcore.api.record import ID_HEADER
        from mwcore.runtime.harness import Produced
        from mwcore.serde.avro import decode_any
        from mwcore.serde.framing import SCHEMA_ID_HEADER, with_schema_id_header
        from mwcore.transport.archive import plan, read_slices

        wanted = list(self.output_topics) if streams is None else streams
        out: dict[str, list[tuple[int, int, Produced]]] = {s: [] for s in wanted}
        seen: set[bytes] = set()
        registry = self.registry()
        types = self.types()

        def take(piece: Any, msg: Any) -> None:
            headers = list(msg.headers() or [])
            rid = next((bytes(v) for n, v in headers if n == ID_HEADER and v is not None), b"")
            if rid and rid in seen:
                return
            seen.add(rid)
            data = msg.value() or b""
            named = [v for n, v in headers if n == SCHEMA_ID_HEADER]
            framed = with_schema_id_header(named[-1] or b"", data) if named else data
            _, value = decode_any(registry, framed)
            declared = types.get(piece.stream)
            if declared is not None and type(value) is dict:
                value = declared.read(value)
            user = tuple((n, bytes(v or b"")) for n, v in headers if not is_reserved(n))
            key = (msg.key() or b"").decode()
            produced = Produced(key, value, msg.timestamp()[1], rid, user)
            out[piece.stream].append((msg.partition(), msg.offset(), produced))

        pieces = plan(self.bootstrap, wanted, namespace=self.namespace)
        read_slices(self.bootstrap, pieces, take)
        return {s: [p for _, _, p in sorted(got, key=lambda t: (t[0], t[1]))] for s, got in out.items()}


def _group(namespace: str, computation: str) -> str:
    from mwcore.transport.topics import topic_name

    return topic_name(namespace, f"mw.{computation}")  # as runtime.layout names it


def _record(stream: str, record: Any, position: int) -> tuple[str, Any, int]:
    if not isinstance(record, tuple) or len(record) not in (2, 3):
        raise ValueError(f"a record of {stream} is (key, value) or (key, value, timestamp), not {record!r}")
    key, value, timestamp = (*record, position) if len(record) == 2 else record
    if not isinstance(key, str):
        raise ValueError(f"a record of {stream}: its key is a str, not {key!r}")
    return key, value, int(timestamp)
