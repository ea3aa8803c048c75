"""The fault suite: a keyed pipeline on the local stack under a seeded schedule of faults.

Run: ``.venv/bin/python bench/chaos.py [--faults 40] [--seed 1] [--scenario mixed|rollback]
[--brokers 3] [--redis-cluster]`` (``rollback``: see ``testbed/chaos/rollback.py``); this
module is the suite's options and entry point, shared by the benchmark and
``tests/test_chaos.py``.

Three ``mw run`` workers of ``testbed/chaos/pipeline.py`` (per-key state, one strong
production per record, event-time windows, wall-time timers; 6 intervals), the
watermark authority, and an injector (in this process) writing out-of-order input at
``--rate`` with 1% of the records re-sent under the same id and 0.1% malformed. While
the input flows, one fault every ``--gap`` seconds, each kind at least once:

- ``worker_kill``: SIGKILL a worker, restart it ``--restart-after`` s later;
- ``worker_restart``: SIGTERM a worker and start it again at once (a rolling restart);
- ``worker_stop``: SIGSTOP a worker past the session timeout, then SIGCONT (a zombie;
  a worker that stopped itself at a fault point, ``MW_FAULTS=...:stop``, is resumed
  the same way);
- ``redis_term`` / ``redis_kill``: restart Redis after SIGTERM / SIGKILL (with
  ``--redis-cluster``: stop the primary of a random interval, wait for its replica to
  take over, start it again: it rejoins as a replica);
- ``authority_kill``: SIGKILL the watermark authority, restart it at once;
- ``broker_kill``: SIGKILL the Kafka broker, restart it (with ``--brokers 3``: SIGKILL
  one of the three, restart it 1 to 5 s later).

Then the input ends, the pipeline drains (every window's and timer's time passes),
and ``testbed/chaos/check.py`` checks the outputs and Redis. The last line printed is
JSON: faults by kind, each check's violations, the longest stall of any interval,
takeover and handover times, wall-timer lateness, catch-up time, and ``"verdict":
"exactly_once"`` only when every check holds.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from testbed.chaos.faults import KINDS
from testbed.chaos.mixed import run_mixed
from testbed.chaos.network import NETWORK_KINDS
from testbed.chaos.rollback import run_rollback


def parse(argv: list[str]) -> argparse.Namespace:
    """The arguments of a run, as ``main`` takes them (for the tests)."""
    return _checked(_parser(), argv)


def _checked(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.kinds is None:
        args.kinds = ",".join(KINDS + NETWORK_KINDS if args.network else KINDS)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS) - set(NETWORK_KINDS))
    if unknown:
        parser.error(f"unknown fault kinds: {', '.join(unknown)}")
    if not args.network and set(kinds) & set(NETWORK_KINDS):
        parser.error("network fault kinds need --network (each process's own proxies)")
    if args.network and (args.brokers > 1 or args.redis_cluster):
        parser.error("--network runs on one broker and one Redis (its proxies front those two)")
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--scenario",
        choices=("mixed", "rollback"),
        default="mixed",
        help="rollback: Redis loses the tail of its writes (testbed/chaos/rollback.py)",
    )
    parser.add_argument("--lag", type=float, default=3.0, help="rollback: seconds of writes the store loses")
    parser.add_argument("--watch", type=float, default=30.0, help="rollback: how long to wait for the stop")
    parser.add_argument("--rate", type=int, default=1000, help="input records per second")
    parser.add_argument("--gap", type=float, default=4.0, help="seconds between faults")
    parser.add_argument(
        "--restart-after", type=float, default=2.0, help="a killed worker restarts after this"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument(
        "--brokers", type=int, default=1, help="Kafka brokers (3: a broker fault SIGKILLs one of them)"
    )
    parser.add_argument(
        "--redis-cluster",
        action="store_true",
        help="the store: a local Redis Cluster (3 primaries, 3 replicas); a Redis fault: a failover",
    )
    parser.add_argument(
        "--network",
        action="store_true",
        help="each process reaches Redis and the broker through its own proxy, and the network "
        "fault kinds (testbed/chaos/network.py) are drawn beside the process ones",
    )
    parser.add_argument(
        "--fault-seconds",
        type=lambda v: tuple(float(x) for x in v.split(",")),
        default=None,
        help="LO,HI: every network fault lasts this long (default: each kind's own range)",
    )
    parser.add_argument(
        "--partition", choices=("either", "cut", "drop"), default="either", help="how a partition cuts"
    )
    parser.add_argument("--settle", type=float, default=12.0, help="seconds of input after the last fault")
    parser.add_argument("--kinds", default=None, help="fault kinds to draw from (default: every kind)")
    parser.add_argument(
        "--worker-env", type=json.loads, default={}, help="JSON of more worker settings (negative controls)"
    )
    parser.add_argument(
        "--delivery",
        choices=("strong", "transactional"),
        default="strong",
        help="the computation's productions (transactional: outside_duplicates must be 0 too)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    result = run(_checked(_parser(), argv))
    print(json.dumps(result))
    return 0 if result["verdict"] in ("exactly_once", "stopped_before_second_payload") else 1


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario ``args`` names; its JSON result."""
    return run_rollback(args) if args.scenario == "rollback" else run_mixed(args)
