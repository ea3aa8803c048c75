"""The negative controls: one switchboard for every mechanism a guarantee rests on.

Each field turns one mechanism off, so that a test can show that the check proving the
guarantee fails without it (pytest marker ``negative_control``). They are read once, at
a process's edge, from ``MW_UNSAFE_<FIELD>`` (``process/settings.py``: an unknown
``MW_UNSAFE_*`` name is refused, so a misspelt control cannot pass unnoticed), and the
object is handed down whole to what each switch turns off. Never set one in a
deployment: a process with any of them on logs ``negative_controls_on`` at start.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class NegativeControls:
    # the checkpoint store (store/redis_store.py)
    disable_fencing: bool = False  # commits ignore the interval's token (I-5)
    counter_tokens: bool = False  # tokens from the grant counter alone, no randomness (I-6)
    # pending productions read back (by a new owner) without their headers, as if the
    # checkpoint kept none: a re-send loses them
    recover_without_headers: bool = False
    # the worker (runtime/)
    disable_dedup: bool = False  # re-sent records are applied again (I-1)
    trust_forgotten_state: bool = False  # a key the cache forgot is served from the first read (I-1)
    keep_fired_timers: bool = False  # a fired timer stays in the checkpoint (I-9)
    drop_dead_letters: bool = False  # a bad record is skipped without a dead letter
    unchecked_weak: bool = False  # unacknowledged weak productions stay out of checkpoints
    rekey_keep_key: bool = False  # rekey stages produce under each record's own key
    skip_drain: bool = False  # SIGTERM exits without committing or draining (I-11)
    no_retake: bool = False  # a fenced interval is never taken back (I-11)
    ignore_rollback: bool = False  # a store behind the commit witness is used anyway (I-10)
    no_schema_lookup: bool = False  # writer schemas are not looked up on the schemas topic
    # transactional productions: the witness written after the transaction, outside it
    witness_outside_txn: bool = False
    # the watermark authority (watermarks/)
    ignore_backlog: bool = False  # records in the Kafka backlog hold no watermark (I-8)
    accept_stale_reports: bool = False  # reports under a stale token are applied (I-8)
    publish_unclamped: bool = False  # a published watermark may go back (I-7)
    retire_drops_backlog: bool = False  # a retired computation's unread records hold nobody (I-8)

    def active(self) -> list[str]:
        """The variables of the switches that are on."""
        return [variable(f.name) for f in fields(self) if getattr(self, f.name)]


SAFE = NegativeControls()  # every mechanism on: what a deployment runs


def variable(name: str) -> str:
    """The environment variable of switch ``name``."""
    return f"MW_UNSAFE_{name.upper()}"
