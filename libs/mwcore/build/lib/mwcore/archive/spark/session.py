"""A Spark session for the ``mw`` commands, with the archive source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

# Spark's own Kafka source, for the PySpark in use: archive reads go through it.
KAFKA_CONNECTOR = f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def local_session(
    master: str = "local[2]", project: Path | None = None, packages: tuple[str, ...] = ()
) -> SparkSession:
    """Executors run this interpreter and import the project's computations by name;
    ``packages``: more Maven coordinates for ``spark.jars.packages`` (Spark resolves
    them, and the Kafka source, from Maven Central into its Ivy cache once)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    root = str((project or Path.cwd()).resolve())
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    if root not in sys.path:
        sys.path.insert(0, root)
    builder = (
        SparkSession.builder.master(master)
        .appName("mw")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "8")
    )
    builder = builder.config("spark.jars.packages", ",".join((KAFKA_CONNECTOR, *packages)))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from mwcore.archive.spark.source import register

    register(spark)
    return spark


@contextmanager
def spark_session(master: str = "local[2]", project: Path | None = None) -> Iterator[SparkSession]:
    """A session for one command: the caller's active session if there is one (left
    running), else a new local one, stopped at the end."""
    ours = SparkSession.getActiveSession() is None
    spark = local_session(master, project)
    try:
        yield spark
    finally:
        if ours:
            spark.stop()


if __name__ == "__main__":  # bootstrap: resolve the Kafka source once, into Ivy's cache
    print(f"Spark's Kafka source: {KAFKA_CONNECTOR}", flush=True)
    local_session().stop()
