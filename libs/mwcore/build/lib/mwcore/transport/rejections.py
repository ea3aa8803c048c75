"""Records of a control topic that a reader cannot use: skipped, logged, counted.

A control topic (the watermark topic, the schemas topic, a consumer group's committed
metadata) is read by every process; anyone who can write it can write anything. A
record that is malformed, out of range or not authentic is skipped: it changes nothing,
raises nothing, and is logged with its topic, partition, offset and the reason (at most
``LOG_BURST`` lines per topic and reason every ``LOG_EVERY_S``, the rest counted in the
next line), and counted for ``mw_rejected_records_total{topic,reason}``. Records of an
input topic are dead letters instead (``runtime/dead_letters.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import structlog

from mwcore.errors import RejectedRecord

log = structlog.get_logger("mwcore.transport.rejections")

LOG_BURST = 10
LOG_EVERY_S = 10.0


@dataclass
class Rejections:
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (topic, reason) -> records
    _window: dict[tuple[str, str], tuple[float, int, int]] = field(default_factory=dict)

    def reject(self, topic: str, partition: int, offset: int, why: RejectedRecord) -> None:
        """Count the record, and log it unless its topic and reason logged enough lately."""
        k = (topic, why.reason)
        self.counts[k] += 1
        now = time.monotonic()
        began, logged, quiet = self._window.get(k, (now, 0, 0))
        if now - began >= LOG_EVERY_S:
            began, logged, quiet = now, 0, quiet
        if logged < LOG_BURST:
            log.warning(
                "record_rejected",
                topic=topic,
                partition=partition,
                offset=offset,
                reason=why.reason,
                detail=why.detail[:200],
                **({"not_logged_before": quiet} if quiet else {}),
            )
            self._window[k] = (began, logged + 1, 0)
        else:
            self._window[k] = (began, logged, quiet + 1)


REJECTED = Rejections()  # the process's: what its readers skipped (served by /metrics)
