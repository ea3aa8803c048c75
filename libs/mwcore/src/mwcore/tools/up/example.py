"""``mw up`` where no ``[tool.mw.up]`` names a pipeline: the running-sum example
(``mwcore.examples.running_sum``).

Two worker processes of ``RunningSum``; a thread of ``mw up`` writes random numbers
to ``numbers`` at the given rate. The summary says how many were written, how many
the workers committed (it waits up to 30 s for them to catch up) and how many
records each output has. The schemas travel with it: it needs no ``schemas/``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from mwcore.serde.avro import SchemaRegistry
from mwcore.serde.framing import DEFAULT_WIRE, check_wire
from mwcore.store.client import redis_client
from mwcore.store.interface import IntervalId
from mwcore.store.redis_store import RedisCheckpointStore
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.topics import end_offsets
from mwcore.transport.writer import SourceWriter

COMPUTATION = "mwcore.examples.running_sum:RunningSum"
WORKERS = 2
SOURCE, OUTPUTS = "numbers", ("sums", "totals")
STREAMS = {SOURCE: 4, **dict.fromkeys(OUTPUTS, 4)}
CATCH_UP_S = 30

SCHEMAS: dict[str, dict[str, Any]] = {
    "number.avsc": {
        "type": "record",
        "name": "Number",
        "namespace": "mw.examples",
        "doc": "An integer to add to a key's running sum.",
        "fields": [{"name": "n", "type": "long", "doc": "The amount to add."}],
    },
    "sum.avsc": {
        "type": "record",
        "name": "Sum",
        "namespace": "mw.examples",
        "doc": "A key's running sum after some number of records.",
        "fields": [
            {"name": "key", "type": "string", "doc": "The key summed over."},
            {"name": "total", "type": "long", "doc": "Sum of n over the key's records so far."},
            {"name": "count", "type": "long", "doc": "How many records the sum covers."},
        ],
    },
}


def write_schemas(directory: Path) -> Path:
    """The example's schemas (as in the repository's ``schemas/examples/``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in SCHEMAS.items():
        (directory / name).write_text(json.dumps(doc, indent=2) + "\n")
    return directory


class RunningSumPipeline:
    """``mw up``'s hooks for the example (``mwcore.tools.up.plan.Pipeline``)."""

    title = "the running-sum example"
    decoded_streams: Collection[str] = ()

    def __init__(self) -> None:
        self.injected = 0
        self._feed: threading.Thread | None = None
        self._store: RedisCheckpointStore | None = None
        self._bootstrap = ""

    def environment(self, workdir: Path) -> dict[str, dict[str, str]]:
        return {}

    def start(self, env: Mapping[str, str], stop: threading.Event, rate: int, duration: float | None) -> None:
        self._bootstrap = env["MW_BOOTSTRAP"]
        self._store = RedisCheckpointStore(redis_client(env["MW_REDIS_URL"]))
        registry = SchemaRegistry.from_directory(env["MW_SCHEMAS_DIR"])
        wire = check_wire(env.get("MW_WIRE") or DEFAULT_WIRE, "MW_WIRE")  # as the example's workers frame
        url = env.get("MW_SCHEMA_REGISTRY_URL")
        client = RegistryClient(RegistryAccess(url)) if url else None
        writer = SourceWriter(
            self._bootstrap, registry, SOURCE, "mw.examples.Number", wire=wire, schema_registry=client
        )
        self._feed = threading.Thread(target=self._write, args=(writer, stop, rate), daemon=True)
        self._feed.start()

    def _write(self, writer: SourceWriter, stop: threading.Event, rate: int) -> None:
        rng = random.Random()
        began = time.monotonic()
        while not stop.is_set():
            target = int((time.monotonic() - began) * rate)
            while self.injected < target:
                writer.write(f"key-{rng.randrange(100)}", {"n": rng.randint(1, 10)}, int(time.time() * 1000))
                self.injected += 1
            writer.producer.poll(0)
            stop.wait(0.01)
        writer.flush()

    def on_record(self, stream: str, value: Any, record_id: bytes) -> None:
        pass

    def view_lines(self) -> list[str]:
        return [f"injected {self.injected:,}    committed {self.committed():,}"]

    def committed(self) -> int:
        """Records of ``numbers`` the workers have checkpointed: the sum of their
        checkpointed input positions."""
        if self._store is None:
            return 0
        return sum(
            self._store.positions(IntervalId("default", "running_sum", index)).get(f"{SOURCE}:{index}", 0)
            for index in range(STREAMS[SOURCE])
        )

    def summary(self, counts: Mapping[str, int], watermarks: Mapping[str, int]) -> dict[str, Any]:
        if self._feed is not None:
            self._feed.join(60)  # it flushes what it wrote
        deadline = time.monotonic() + CATCH_UP_S
        while time.monotonic() < deadline and self.committed() < self.injected:
            time.sleep(0.2)
        # a checkpoint's productions reach Kafka just after it: each input makes one sum
        while time.monotonic() < deadline and _records(self._bootstrap, "sums") < self.injected:
            time.sleep(0.2)
        return {
            "records_injected": self.injected,
            "records_committed": self.committed(),
            "outputs": {s: _records(self._bootstrap, s) for s in OUTPUTS},
        }


def _records(bootstrap: str, stream: str) -> int:
    """Records in a stream: the sum of its partitions' end offsets."""
    return sum(end_offsets(bootstrap, {stream: STREAMS[stream]}).values())
