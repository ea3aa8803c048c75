"""A/B runs of the worker, alternating variants in one local stack (this machine is
noisy: compare side by side, never against a figure from another hour).

Run: ``.venv/bin/python bench/ab.py latency|throughput ROUNDS VARIANT...``, each
variant a JSON object of environment settings for the worker process, e.g.
``'{}' '{"MW_MAX_BATCH_DELAY_MS": "3"}'``; keys ``REDIS_<name>`` set Redis's
configuration for the variant instead (``CONFIG SET``, e.g. ``"REDIS_appendfsync":
"everysec"``); or older code of the library:
``git worktree add /tmp/base <commit>`` and
``'{"PYTHONPATH": "/tmp/base/libs/mwcore/src:."}'``. A variant's ``MW_WIRE`` is also
the framing its inputs are written in (the kit's default unless told): code older than
the Confluent framing reads single-object only, so its variant says
``"MW_WIRE": "single-object"`` (which it ignores). Likewise its ``MW_ID_SECRET`` signs
the inputs (``MW_MAC_V1``: ``write`` for code that checks version 1 only).

``latency``: ``bench/throughput.py``'s steady 10,000 records/s phase
(``--seconds``, default 20) per variant and round (``--visible``: with how soon a
``read_committed`` reader outside the kit sees each production). ``throughput``: ``--records``
(default 200,000) loaded into a fresh topic, then one worker's rate and CPU per
record. ``windowed``: ``bench/windowed.py``'s workload (``--records``), in a fresh
namespace per variant and round. One line per run; the last line is JSON with every
run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import windowed
from bench.throughput import PARTITIONS, ROOT, load, run_worker, steady_latency
from mwcore.serde.avro import SchemaRegistry
from mwcore.tools.stack.localstack import LocalStack
from mwcore.transport.topics import ensure_topics, topic_name
from testbed import wire


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("latency", "throughput", "windowed"))
    parser.add_argument("rounds", type=int)
    parser.add_argument("variants", nargs="+", type=json.loads)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument(
        "--visible",
        action="store_true",
        help="latency: also how soon a read_committed reader outside the kit sees each production",
    )
    args = parser.parse_args()
    registry = SchemaRegistry.from_directory(ROOT / "schemas")
    runs = []
    with LocalStack() as stack:
        for r in range(args.rounds):
            for k, variant in enumerate(args.variants):
                env = {n: v for n, v in variant.items() if not n.startswith("REDIS_")}
                for n, v in variant.items():
                    if n.startswith("REDIS_"):
                        redis.Redis.from_url(stack.redis_url).config_set(n[len("REDIS_") :], v)
                if args.what == "latency":
                    res = steady_latency(stack, registry, args.rate, args.seconds, args.visible, **env)
                elif args.what == "windowed":
                    out = windowed.run_in(stack, registry, args.records, f"ab{r}x{k}", **env)
                    res: dict[str, Any] = {f: v for f, v in out.items() if f != "profile"}
                else:
                    namespace = f"ab{r}x{k}"
                    topic = topic_name(namespace, "events")
                    ensure_topics(stack.bootstrap, {topic: PARTITIONS})
                    ends = load(stack, registry, topic, args.records, wire.of(env), wire.signer_of(env))
                    res = run_worker(stack, namespace, topic, ends, **env)
                figures = {f: round(v, 1) if isinstance(v, float) else v for f, v in res.items()}
                run = {"round": r, "variant": variant, **figures}
                print(json.dumps(run), flush=True)
                runs.append(run)
                redis.Redis.from_url(stack.redis_url).config_set("appendfsync", "always")  # the default
    print(json.dumps(runs))


if __name__ == "__main__":
    main()
