"""PySpark over archived streams: ``spark.read.format("mw")`` (see ``source``)."""

from mwcore.spark.source import ArchiveDataSource, read_archive, register

__all__ = ["ArchiveDataSource", "read_archive", "register"]
