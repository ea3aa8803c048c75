"""mwcore: MillWheel-style exactly-once stream processing on Kafka and Redis.

The public API, what services import (with ``mwcore.testing``):

- writing a computation: ``Computation``, ``Input``, ``Output``, ``Options``,
  ``Context``, ``Record``, ``Timer``, ``TimeDomain``, the state codecs, record ids;
- running processes: ``run_computation``, ``run_authority``, ``run_injector`` (with
  ``Injector`` and ``InjectorSettings``), ``load_settings`` for a service's own settings,
  ``preflight`` for a process of its own;
- schemas and streams: ``SchemaRegistry``, ``AvroSerde``, ``stream_partitions``, the
  watermark bounds;
- batch: ``read_archive`` and ``spark_session`` (PySpark, imported when first used);
- the exception tree, rooted in ``MwError``.

Process-level names are imported on first use, so that importing a computation (in a
Spark executor, in a unit test) does not load the Kafka and Redis clients.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

from mwcore.api.clock import MAX_WATERMARK, MIN_WATERMARK
from mwcore.api.codecs import AvroCodec, DataclassCodec, JsonCodec, PydanticCodec, StateCodec
from mwcore.api.computation import Computation, Input, Options, Output, load_computation
from mwcore.api.context import Context
from mwcore.api.headers import ReservedHeader
from mwcore.api.ids import ID_BYTES
from mwcore.api.ids import derive as derive_id
from mwcore.api.record import Production, Record, TimeDomain, Timer
from mwcore.errors import (
    CheckpointError,
    ConfigError,
    FencedError,
    MwError,
    RefusedError,
    SerializationError,
    StoreRollbackError,
    UnknownSchemaError,
)
from mwcore.serde.avro import AvroSerde, SchemaRegistry

if TYPE_CHECKING:
    from mwcore.archive.spark.session import spark_session
    from mwcore.archive.spark.source import read_archive
    from mwcore.injector.injector import Injector
    from mwcore.process.bootstrap import preflight
    from mwcore.process.run import InjectorSource, run_authority, run_computation, run_injector
    from mwcore.process.settings import ClientSettings, InjectorSettings, load_settings
    from mwcore.transport.topics import stream_partitions

_LAZY = {
    "InjectorSource": "mwcore.process.run",
    "run_authority": "mwcore.process.run",
    "run_computation": "mwcore.process.run",
    "run_injector": "mwcore.process.run",
    "preflight": "mwcore.process.bootstrap",
    "ClientSettings": "mwcore.process.settings",
    "InjectorSettings": "mwcore.process.settings",
    "load_settings": "mwcore.process.settings",
    "Injector": "mwcore.injector.injector",
    "stream_partitions": "mwcore.transport.topics",
    "read_archive": "mwcore.archive.spark.source",
    "spark_session": "mwcore.archive.spark.session",
}


def _version() -> str:
    """The installed distribution's (from the git tags: libs/mwcore/pyproject.toml's
    ``[tool.setuptools_scm]``); ``0.0.0`` where mwcore runs from a tree not installed."""
    try:
        return importlib.metadata.version("mwcore")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


__version__ = _version()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mwcore' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ID_BYTES",
    "MAX_WATERMARK",
    "MIN_WATERMARK",
    "AvroCodec",
    "AvroSerde",
    "CheckpointError",
    "ClientSettings",
    "Computation",
    "ConfigError",
    "Context",
    "DataclassCodec",
    "FencedError",
    "Injector",
    "InjectorSettings",
    "InjectorSource",
    "Input",
    "JsonCodec",
    "MwError",
    "Options",
    "Output",
    "Production",
    "PydanticCodec",
    "Record",
    "RefusedError",
    "ReservedHeader",
    "SchemaRegistry",
    "SerializationError",
    "StateCodec",
    "StoreRollbackError",
    "TimeDomain",
    "Timer",
    "UnknownSchemaError",
    "__version__",
    "derive_id",
    "load_computation",
    "load_settings",
    "preflight",
    "read_archive",
    "run_authority",
    "run_computation",
    "run_injector",
    "spark_session",
    "stream_partitions",
]
