"""PySpark over archived streams: ``read_archive`` (Spark's Kafka source, the kit's decoding
on top) and ``df.write.format("mw")`` (see ``source`` and ``sink``)."""

from mwcore.archive.spark.source import ArchiveDataSource, read_archive, register

__all__ = ["ArchiveDataSource", "read_archive", "register"]
