"""A Spark session for the ``mw`` commands, with the archive source registered."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession


def local_session(
    master: str = "local[2]", project: Path | None = None, packages: tuple[str, ...] = ()
) -> SparkSession:
    """Executors run this interpreter and import the project's computations by name;
    ``packages``: Maven coordinates for ``spark.jars.packages`` (e.g. Spark's Kafka source)."""
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
    if packages:
        builder = builder.config("spark.jars.packages", ",".join(packages))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    from mwcore.spark import register

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
