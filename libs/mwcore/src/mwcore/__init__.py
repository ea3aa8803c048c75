"""mwcore: MillWheel-style exactly-once stream processing on Kafka and Redis."""

from mwcore.api.codecs import AvroCodec, DataclassCodec, JsonCodec, StateCodec
from mwcore.api.computation import Computation, Input, Options, Output
from mwcore.api.context import Context
from mwcore.api.record import Production, Record, TimeDomain, Timer
from mwcore.errors import (
    CheckpointError,
    ConfigError,
    FencedError,
    MwError,
    SerializationError,
    StoreRollbackError,
    UnknownSchemaError,
)

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
