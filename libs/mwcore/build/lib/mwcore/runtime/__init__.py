"""The worker: key intervals, batches and checkpoints, timers, the outbox, dedup, rekey,
watermark reports; the in-memory engine under the batch runner and the test harness."""
