"""Fault injection for the crash and zombie tests.

``MW_FAULTS`` lists points with an action and a probability, e.g.
``after_commit:kill:0.02,in_timer:kill:0.01`` or ``before_commit:stop:1:once:after=20``
(``once``: fire at most once; ``after=N``: let the first N passes go by). When a
point fires, a JSON line naming it (plus what the caller describes) is appended to
``MW_FAULT_LOG`` and the process sends itself SIGKILL, or SIGSTOP (a zombie to be).
Points: ``mid_batch``, ``before_commit`` (of a batch with productions),
``after_commit``, ``after_produce`` (acknowledged, deletion not yet committed),
``in_timer``, ``in_transaction`` and ``after_transaction`` (transactional productions:
sent with the witness, the transaction not yet committed; committed, its outcome not yet
taken). With no spec nothing fires and a call costs one dict lookup.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mwcore.errors import ConfigError

POINTS = (
    "mid_batch",
    "before_commit",
    "after_commit",
    "after_produce",
    "in_timer",
    "in_transaction",
    "after_transaction",
)


@dataclass
class _Rule:
    action: str
    probability: float
    once: bool
    after: int = 0
    passes: int = 0
    fired: bool = False


class Faults:
    def __init__(self, spec: str = "", log_path: str = "", seed: int | None = None) -> None:
        self._rules: dict[str, _Rule] = {}
        self._log = log_path
        self._rng = random.Random(seed)
        for item in filter(None, (s.strip() for s in spec.split(","))):
            parts = item.split(":")
            if len(parts) < 3 or parts[0] not in POINTS or parts[1] not in ("kill", "stop"):
                raise ConfigError(
                    f"MW_FAULTS entry {item!r}: want point:kill|stop:probability[:once], "
                    f"points {', '.join(POINTS)}"
                )
            after = 0
            for opt in parts[3:]:
                if opt.startswith("after="):
                    after = int(opt[len("after=") :])
                elif opt != "once":
                    raise ConfigError(f"MW_FAULTS entry {item!r}: unknown option {opt!r}")
            self._rules[parts[0]] = _Rule(parts[1], float(parts[2]), "once" in parts[3:], after)

    @property
    def enabled(self) -> bool:
        return bool(self._rules)

    def point(self, name: str, describe: Callable[[], dict[str, Any]] | None = None) -> None:
        rule = self._rules.get(name)
        if rule is None or (rule.once and rule.fired):
            return
        rule.passes += 1
        if rule.passes <= rule.after:
            return
        if self._rng.random() >= rule.probability:
            return
        rule.fired = True
        entry = {"point": name, "action": rule.action, "pid": os.getpid(), "time": time.time()}
        if describe is not None:
            entry.update(describe())
        if self._log:
            with open(self._log, "a") as fh:
                fh.write(json.dumps(entry) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        sig = signal.SIGKILL if rule.action == "kill" else signal.SIGSTOP
        os.kill(os.getpid(), sig)


NO_FAULTS = Faults()
