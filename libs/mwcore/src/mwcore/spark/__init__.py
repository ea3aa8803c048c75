"""PySpark over archived streams: ``spark.read.format("mw")`` (see ``source``)."""

from mwcore.spark.source import ArchiveDataSource, register

__all__ = ["ArchiveDataSource", "register"]
