"""The worker: key intervals, batches and checkpoints, timers, the outbox, dedup, rekey, injectors."""
