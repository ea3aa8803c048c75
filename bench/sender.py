"""The native sender's cost per production, handed to librdkafka, without a broker.

Run: ``.venv/bin/python bench/sender.py [--productions 5000] [--rounds 20]``; prints
JSON (the last line). Compare builds in one sitting by putting an older native module
first on ``PYTHONPATH``, alternating.

The producer points at a local port nobody listens on, so every production stays
queued in librdkafka (nothing is acknowledged, nothing is sent): what is timed is
``Producer.send_all`` alone, the crossing with the batch, reading each production's
fields, building its headers (its id) and librdkafka's ``produceva``. The batch has
the shape of ``bench/throughput.py``'s keyed count: a 16-byte id, one topic, a key
``query-N`` of 10,000 keys, a 6-byte value and a timestamp each. The figure is the
best round's time divided by the productions it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mwcore.api.record import ID_HEADER, Production
from mwcore.cores.native import require, rust
from mwcore.tools.stack.localproc import free_port


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--productions", type=int, default=5_000, help="per batch (one send_all)")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    require()  # (built? else one line saying how)
    producer = rust.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{free_port()}",
            # all of them stay queued: nothing may be refused as the queue fills
            "queue.buffering.max.messages": str(args.productions * args.rounds + 1),
            "message.timeout.ms": "300000",
            "compression.type": "lz4",
            "partitioner": "murmur2_random",
            "log_level": "0",
        }
    )
    ts = 1_700_000_000_000
    batch = [
        Production(os.urandom(16), "bench-counts", f"query-{i % 10_000}".encode(), b"\x02" * 6, ts + i)
        for i in range(args.productions)
    ]
    times = []
    for r in range(args.rounds):
        began = time.perf_counter()
        producer.send_all(r + 1, batch, ID_HEADER, (), "mw-mac", None, False)
        times.append(time.perf_counter() - began)
    best = min(times) / args.productions * 1e9
    out = {"module": rust.__file__, "productions": args.productions, "best_ns_per_production": round(best)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
