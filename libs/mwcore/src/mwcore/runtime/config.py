"""A worker's configuration, read once at the process's edge (``process.settings``)."""

from __future__ import annotations

from dataclasses import dataclass

from mwcore.api.signing import UNSIGNED, Signer
from mwcore.controls import SAFE, NegativeControls
from mwcore.core import Core


@dataclass(frozen=True)
class WorkerConfig:
    bootstrap: str
    namespace: str = "default"
    worker_id: str = "worker"
    instance_id: str | None = None  # static group membership: fast restarts
    max_batch_records: int = 5000
    max_batch_delay_ms: int = 5
    # productions and watermark reports of a checkpoint wait until the commit witness
    # covers it (witness.py); off: the witness only detects (no added latency)
    witness_gate: bool = True
    health_stall_s: float = 60.0  # no progress this long while input waits: unhealthy (health.py)
    session_timeout_ms: int = 1500  # also sets the heartbeat: a tenth of it
    poll_records: int = 5000
    max_cache_keys: int = 100_000
    # MW_WHOLE_STATE_MB: at acquisition, an interval's whole state is read when it is at
    # most this many MiB and max_cache_keys keys (runtime/state_cache.py); 0: each key on first use
    whole_state_mb: int = 64
    # after a batch is redone (runtime/effects.py), each call's state is encoded at once
    # for at least this long: a steady stream of failing records is not redone batch by batch
    careful_s: float = 30.0
    latency_out: str = ""  # if set: record commit latency, write percentiles here at exit
    refence_backoff_s: float = 10.0  # after losing an interval to another grant
    report_interval_ms: int = 50  # watermark reports to the authority
    seen_gc_slack_ms: int = 60_000
    accept_store_rollback: bool = False  # an operator's choice after a stop (MW_ACCEPT_STORE_ROLLBACK)
    controls: NegativeControls = SAFE  # MW_UNSAFE_*: the negative controls (mwcore/controls.py)
    signer: Signer = UNSIGNED  # MW_ID_SECRET: ids signed and checked (api/signing.py)
    # MW_NATIVE_CONSUMER (with the native core): the group consumer on the native core's
    # librdkafka (transport/native_consumer.py) instead of confluent-kafka's
    native_consumer: bool = False
    # MW_NATIVE_BATCH_POLL (with the native consumer): a poll's messages in one call
    native_batch_poll: bool = False
    # MW_NATIVE_EFFECTS (with the native core): user code run on the native Context and its
    # effects applied in Rust (runtime/effects.py), the timers on the native queue
    native_effects: bool = False
    # MW_OVERLAP_COMMITS: each commit turn's checkpoints are written while the next batch
    # is built (worker.py, "commits"); off: the worker waits for the store's reply
    overlap_commits: bool = True
    core: Core = "python"  # MW_CORE (mwcore/core.py): the store's packing, the dedup filter
