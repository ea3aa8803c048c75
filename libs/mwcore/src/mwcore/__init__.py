"""mwcore: MillWheel-style exactly-once stream processing on Kafka and Redis."""

from mwcore.codecs import AvroCodec, DataclassCodec, JsonCodec, StateCodec
from mwcore.computation import Computation, Input, Options, Output
from mwcore.context import Context
from mwcore.errors import (
    CheckpointError,
    ConfigError,
    FencedError,
    MwError,
    SerializationError,
    StoreRollbackError,
    UnknownSchemaError,
)
from mwcore.record import Production, Record, TimeDomain, Timer

__all__ = [
    "AvroCodec",
    "CheckpointError",
    "Computation",
    "ConfigError",
    "Context",
    "DataclassCodec",
    "FencedError",
    "Input",
    "JsonCodec",
    "MwError",
    "Options",
    "Output",
    "Production",
    "Record",
    "SerializationError",
    "StateCodec",
    "StoreRollbackError",
    "TimeDomain",
    "Timer",
    "UnknownSchemaError",
]
