"""Run inside a container of the compose project (``python - < this file``): what the
pipeline wrote, read from Kafka on the project's own network, as one JSON line.

Reads the watermarks the authority published and every record of ``window_counts`` and
``anomalies`` (a record re-sent after a crash, with the same id, counted once); with the
argument ``watermarks`` (``python - watermarks``) only the watermarks, which is what a
test polls while it waits (reading and decoding every window every few seconds would
take CPU from the pipeline it waits for). Only the service image's packages (mwcore,
services) are used.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from mwcore.serde.avro import AvroSerde, SchemaRegistry
from mwcore.serde.framing import Framing
from mwcore.transport.schema_registry import RegistryAccess, RegistryClient
from mwcore.transport.topics import consumer_config, partition_counts
from mwcore.transport.watermark_topic import WatermarkFeed


def read(bootstrap: str, topic: str, schema: str, registry: SchemaRegistry) -> list[dict[str, Any]]:
    n = partition_counts(bootstrap, [topic]).get(topic)
    if n is None:
        return []
    # the services frame as the project's MW_WIRE says: either framing is read here
    serde = AvroSerde(registry, schema, framing=Framing("single-object", read_also="confluent"))
    conf = consumer_config(bootstrap, f"probe-{uuid.uuid4().hex}", **{"enable.partition.eof": True})
    c = Consumer(conf)
    c.assign([TopicPartition(topic, p, 0) for p in range(n)])
    out: list[dict[str, Any]] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(eof) < n and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition() or 0)
                    continue
                rid = next((v for k, v in m.headers() or () if k == "mw-id"), b"")
                out.append({"id": (rid or b"").hex(), "value": serde.decode(m.value() or b"")})
    finally:
        c.close()
    if len(eof) < n:
        raise SystemExit(f"{topic}: not read to its end")
    return out


def main() -> None:
    bootstrap = os.environ["MW_BOOTSTRAP"]
    registry = SchemaRegistry.from_directory(os.environ.get("MW_SCHEMAS_DIR", "/app/schemas"))
    url = os.environ.get("MW_SCHEMA_REGISTRY_URL")
    if url:  # values framed "confluent" name their schemas by its ids
        registry.use_ids(RegistryClient(RegistryAccess(url)))
    feed = WatermarkFeed(bootstrap, "default")
    try:
        feed.read_to_end(60)
        watermarks = {n: {"input": w.input, "output": w.output} for n, w in feed.latest.items()}
    finally:
        feed.close()
    result: dict[str, Any] = {"watermarks": watermarks}  # read first: what is read below is at least this far
    if sys.argv[1:] != ["watermarks"]:
        result["window_counts"] = read(bootstrap, "window_counts", "zeitgeist.WindowCount", registry)
        result["anomalies"] = read(bootstrap, "anomalies", "zeitgeist.Anomaly", registry)
    sys.stdout.write(json.dumps(result) + "\n")


main()
