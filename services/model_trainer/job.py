"""The Zeitgeist model job (Spark): archived ``window_counts`` in, one time-of-day
profile per query out, published to ``model_updates`` for the dip detector.

    spark = local_session()
    models = train(read_counts(spark, bootstrap, namespace), period_ms=86_400_000, slots=1440)
    publish(models, bootstrap, namespace)

A model's record id is a hash of what it was trained from (query, period, slots and
the training range) and its version is the end of that range: running the job again
over the same archive publishes nothing (ids already in ``model_updates`` are left
out, and a detector drops any repeat as a duplicate), and a job over more weeks
publishes a newer version that replaces the old one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from mwcore import ID_BYTES, read_archive, stream_partitions
from services.model_trainer.profile import BUCKET_MS, fit_profile

MODEL_SCHEMA = "zeitgeist.ModelUpdate"
MODELS_STREAM = "model_updates"
COUNTS_STREAM = "window_counts"
COUNTS_SCHEMA = "zeitgeist.WindowCount"


@dataclass(frozen=True)
class Trained:
    models: DataFrame  # query, period_ms, profile, trained_until, version, key, timestamp, id
    start_ms: int
    end_ms: int


def read_counts(
    spark: SparkSession,
    bootstrap: str,
    namespace: str,
    schemas_dir: Path | None = None,
    until_ms: int | None = None,
) -> DataFrame:
    """Archived window counts (query, lang, bucket_start, count), every bucket that
    ends by ``until_ms`` (default: all); each record once (a batch the windower re-sent
    after a crash is in the archive twice, with the same ids)."""
    df = read_archive(spark, bootstrap, COUNTS_STREAM, namespace, schemas_dir, avroSchema=COUNTS_SCHEMA)
    df = df.where(F.col("decode_error").isNull())
    if until_ms is not None:
        df = df.where(F.col("bucket_start") + BUCKET_MS <= until_ms)
    return df.dropDuplicates(["id"]).select("query", "lang", "bucket_start", "count")


def model_id(query: str, period_ms: int, slots: int, start_ms: int, end_ms: int) -> bytes:
    payload = f"{query}\x00{period_ms}\x00{slots}\x00{start_ms}\x00{end_ms}".encode()
    return hashlib.blake2b(payload, digest_size=ID_BYTES, person=b"mw-model").digest()


class NothingToTrain(ValueError):
    """The archive holds no whole period yet (the default range is empty): a daily run
    on a young pipeline has nothing to do, which is not a failure."""


def train(
    counts: DataFrame,
    period_ms: int,
    slots: int,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> Trained:
    """One profile per query over buckets in ``[start_ms, end_ms)`` (a query missing
    from a bucket counts 0 there). By default the range is every whole period the
    archive holds: from the first period boundary after its first bucket to the last
    boundary before the end of its last, so that runs on the same day train on the
    same range (and publish nothing new), and the last buckets, whose counts may still
    be on their way, are left for the next day's run."""
    import pandas as pd

    fit_profile([], 0, 0, period_ms, slots)  # a bad period / slot count fails here, on the driver
    if start_ms is None or end_ms is None:
        first, last = counts.agg(F.min("bucket_start"), F.max("bucket_start")).collect()[0]
        if first is None:
            raise NothingToTrain("no window counts to train from yet")
        if start_ms is None:
            start_ms = -(-int(first) // period_ms) * period_ms
        if end_ms is None:
            end_ms = (int(last) + BUCKET_MS) // period_ms * period_ms
        if end_ms <= start_ms:
            raise NothingToTrain(
                f"the archive holds no whole period of {period_ms} ms between {first} and "
                f"{int(last) + BUCKET_MS}: pass the range to train on (--from / --to)"
            )
    start, end = start_ms, end_ms
    counts = counts.where((F.col("bucket_start") >= start) & (F.col("bucket_start") < end))

    def fit(pdf: pd.DataFrame) -> pd.DataFrame:
        query = str(pdf["query"].iloc[0])
        pairs = zip(pdf["bucket_start"].tolist(), pdf["count"].tolist(), strict=True)
        profile = fit_profile(pairs, start, end, period_ms, slots)
        return pd.DataFrame(
            {
                "query": [query],
                "profile": [profile],
                "id": [model_id(query, period_ms, slots, start, end)],
            }
        )

    fitted = counts.groupBy("query").applyInPandas(fit, "query string, profile array<double>, id binary")
    models = fitted.select(
        "query",
        F.lit(period_ms).cast("long").alias("period_ms"),
        "profile",
        F.lit(end).cast("long").alias("trained_until"),
        F.lit(end).cast("long").alias("version"),
        F.col("query").alias("key"),
        F.lit(end).cast("long").alias("timestamp"),
        "id",
    )
    return Trained(models, start, end)


def published_ids(spark: SparkSession, bootstrap: str, namespace: str) -> DataFrame | None:
    """Ids already in ``model_updates`` (None: the stream does not exist yet)."""
    if not stream_partitions(bootstrap, MODELS_STREAM, namespace):
        return None
    return read_archive(spark, bootstrap, MODELS_STREAM, namespace, decode="false").select("id")


def publish(
    trained: Trained, bootstrap: str, namespace: str, schemas_dir: Path | None = None
) -> dict[str, Any]:
    """Append the models not published yet to ``model_updates``; how many of each."""
    spark = trained.models.sparkSession
    models = trained.models.cache()
    done = published_ids(spark, bootstrap, namespace)
    fresh = models if done is None else models.join(done, "id", "left_anti")
    fresh = fresh.cache()
    n_fresh, n_all = fresh.count(), models.count()
    writer = (
        fresh.write.format("mw")
        .mode("append")
        .option("bootstrap", bootstrap)
        .option("namespace", namespace)
        .option("stream", MODELS_STREAM)
        .option("avroSchema", MODEL_SCHEMA)
        .option("partitions", str(_partitions(bootstrap, namespace)))
    )
    if schemas_dir is not None:
        writer = writer.option("schemasDir", str(schemas_dir))
    if n_fresh:
        writer.save()
    return {
        "queries": n_all,
        "published": n_fresh,
        "already_published": n_all - n_fresh,
        "trained_from": trained.start_ms,
        "trained_until": trained.end_ms,
    }


def _partitions(bootstrap: str, namespace: str) -> int:
    """``model_updates`` is co-partitioned with ``window_counts`` (the detector reads both
    by query)."""
    return stream_partitions(bootstrap, COUNTS_STREAM, namespace) or 4
