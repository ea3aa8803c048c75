"""Batch over archived streams: the batch runner, replay (backfill), and Spark."""
