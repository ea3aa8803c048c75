"""``python -m services.model_trainer``: train the dip detector's time-of-day models
from the archived ``window_counts`` (Spark) and publish them to ``model_updates``.
Prints a JSON summary as its last line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mwcore import ConfigError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m services.model_trainer", description=__doc__)
    p.add_argument(
        "--from",
        dest="start_ms",
        type=int,
        help="train on buckets from this time (ms; default: whole periods)",
    )
    p.add_argument("--to", dest="end_ms", type=int, help="... up to this time (ms, exclusive)")
    p.add_argument("--period-ms", type=int, help="the rhythm's period (default MW_MODEL_PERIOD_MS, a day)")
    p.add_argument("--slots", type=int, help="slots per period (default MW_MODEL_SLOTS, 1440)")
    p.add_argument("--namespace", help="default MW_NAMESPACE")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {
        k: v
        for k, v in (
            ("model_period_ms", args.period_ms),
            ("model_slots", args.slots),
            ("namespace", args.namespace),
        )
        if v is not None
    }
    from services.model_trainer.settings import TrainerSettings

    try:
        s = TrainerSettings.load(**overrides)
    except ConfigError as exc:
        print(f"model_trainer: {exc}", file=sys.stderr)
        return 2
    from mwcore import preflight, spark_session
    from services.model_trainer.job import NothingToTrain, publish, read_counts, train

    try:
        preflight(s.bootstrap)
    except ConfigError as exc:
        print(f"model_trainer: {exc}", file=sys.stderr)
        return 2

    # Buckets its own clock has passed, only: a window count stamped in the future (anyone
    # who can write window_counts may write one) must not make a model from the future,
    # which the detector refuses (its version ahead of the detector's clock)
    now_ms = int(time.time() * 1000)
    if args.end_ms is not None and args.end_ms > now_ms:
        print(
            f"model_trainer: --to {args.end_ms} is ahead of this clock ({now_ms}): train on the past",
            file=sys.stderr,
        )
        return 2
    with spark_session(s.spark_master, Path.cwd()) as spark:
        until = now_ms if args.end_ms is None else args.end_ms
        counts = read_counts(spark, s.bootstrap, s.namespace, s.schemas_dir, until)
        try:
            trained = train(counts, s.model_period_ms, s.model_slots, args.start_ms, args.end_ms)
        except NothingToTrain as exc:  # a young archive: nothing to do yet, not a failure
            print(f"model_trainer: nothing to train: {exc}", file=sys.stderr)
            print(json.dumps({"queries": 0, "published": 0, "nothing_to_train": str(exc)}), flush=True)
            return 0
        except ValueError as exc:
            print(f"model_trainer: {exc}", file=sys.stderr)
            return 2
        summary = publish(trained, s.bootstrap, s.namespace, s.schemas_dir)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
