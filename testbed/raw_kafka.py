"""What any client on librdkafka's C API may write to Kafka and confluent-kafka will not:
a record whose header name is not UTF-8 (confluent-kafka's ``Producer`` takes header names
as ``str`` only; Kafka carries them as bytes and checks nothing of them), and committed
offsets whose metadata is not UTF-8 (Kafka keeps whatever bytes a client commits).

Through ``ctypes``, on the librdkafka that confluent-kafka's wheel ships
(``rd_kafka_produceva``, whose header names are NUL-terminated bytes; ``rd_kafka_commit``).
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import confluent_kafka

# rd_kafka_vtype_t
_END, _TOPIC, _PARTITION, _VALUE, _KEY, _HEADER = 0, 1, 3, 4, 5, 9
_PRODUCER, _CONSUMER = 0, 1  # rd_kafka_type_t


class _Mem(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("val", ctypes.c_void_p), ("size", ctypes.c_ssize_t)]


class _Value(ctypes.Union):
    _fields_ = [
        ("cstr", ctypes.c_char_p),
        ("i32", ctypes.c_int32),
        ("mem", _Mem),
        ("header", _Header),
        ("_pad", ctypes.c_char * 64),
    ]


class _VU(ctypes.Structure):  # rd_kafka_vu_t
    _fields_ = [("vtype", ctypes.c_int), ("u", _Value)]


class _TopicPartition(ctypes.Structure):  # rd_kafka_topic_partition_t
    _fields_ = [
        ("topic", ctypes.c_char_p),
        ("partition", ctypes.c_int32),
        ("offset", ctypes.c_int64),
        ("metadata", ctypes.c_void_p),
        ("metadata_size", ctypes.c_size_t),
        ("opaque", ctypes.c_void_p),
        ("err", ctypes.c_int),
        ("_private", ctypes.c_void_p),
    ]


@cache
def _librdkafka() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        raise RuntimeError(f"no librdkafka in {libs}")
    lib = ctypes.CDLL(str(found[0]))
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]  # fmt: skip
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.argtypes = [ctypes.c_void_p, ctypes.POINTER(_VU), ctypes.c_size_t]
    lib.rd_kafka_error_string.restype = ctypes.c_char_p
    lib.rd_kafka_error_string.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_outq_len.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_topic_partition_list_new.restype = ctypes.c_void_p
    lib.rd_kafka_topic_partition_list_new.argtypes = [ctypes.c_int]
    lib.rd_kafka_topic_partition_list_add.restype = ctypes.POINTER(_TopicPartition)
    lib.rd_kafka_topic_partition_list_add.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32]
    lib.rd_kafka_topic_partition_list_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_commit.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_err2str.argtypes = [ctypes.c_int]
    return lib


def _client(kind: int, settings: dict[bytes, bytes]) -> int:
    lib = _librdkafka()
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, setting in settings.items():
        if lib.rd_kafka_conf_set(conf, name, setting, err, len(err)) != 0:
            raise RuntimeError(err.value.decode())
    rk = lib.rd_kafka_new(kind, conf, err, len(err))
    if not rk:
        raise RuntimeError(err.value.decode())
    return int(rk)


def commit_with_metadata(
    bootstrap: str, group: str, topic: str, partition: int, offset: int, metadata: bytes
) -> None:
    """Commit ``offset`` of the partition for ``group`` with ``metadata`` (any bytes), as
    a member outside the group's generation does (the group empty meanwhile)."""
    lib = _librdkafka()
    rk = _client(_CONSUMER, {b"bootstrap.servers": bootstrap.encode(), b"group.id": group.encode()})
    parts = lib.rd_kafka_topic_partition_list_new(1)
    try:
        elem = lib.rd_kafka_topic_partition_list_add(parts, topic.encode(), partition).contents
        elem.offset = offset
        raw = ctypes.CDLL(None).malloc  # the list frees its metadata with free()
        raw.restype = ctypes.c_void_p
        buf = raw(len(metadata))
        ctypes.memmove(buf, metadata, len(metadata))
        elem.metadata, elem.metadata_size = buf, len(metadata)
        code = lib.rd_kafka_commit(rk, parts, 0)
        if code != 0:
            raise RuntimeError(lib.rd_kafka_err2str(code).decode())
    finally:
        lib.rd_kafka_topic_partition_list_destroy(parts)
        lib.rd_kafka_destroy(rk)


def _mem(vu: _VU, vtype: int, data: bytes, keep: list[object]) -> None:
    buf = ctypes.create_string_buffer(data, len(data))
    keep.append(buf)
    vu.vtype = vtype
    vu.u.mem = _Mem(ctypes.cast(buf, ctypes.c_void_p), len(data))


def produce_with_headers(
    bootstrap: str,
    topic: str,
    key: bytes,
    value: bytes,
    headers: list[tuple[bytes, bytes]],
    partition: int = 0,
) -> None:
    """One record with ``headers`` (names any bytes but NUL), waiting for the broker."""
    lib = _librdkafka()
    rk = _client(_PRODUCER, {b"bootstrap.servers": bootstrap.encode(), b"acks": b"all"})
    try:
        keep: list[object] = []
        vus = (_VU * (4 + len(headers)))()
        vus[0].vtype, vus[0].u.cstr = _TOPIC, topic.encode()
        vus[1].vtype, vus[1].u.i32 = _PARTITION, partition
        _mem(vus[2], _KEY, key, keep)
        _mem(vus[3], _VALUE, value, keep)
        for vu, (name, hval) in zip(vus[4:], headers, strict=True):
            buf = ctypes.create_string_buffer(hval, len(hval))
            keep.append(buf)
            vu.vtype = _HEADER
            vu.u.header = _Header(name, ctypes.cast(buf, ctypes.c_void_p), len(hval))
        failed = lib.rd_kafka_produceva(rk, vus, len(vus))
        if failed:
            raise RuntimeError(lib.rd_kafka_error_string(failed).decode())
        lib.rd_kafka_flush(rk, 30_000)
        if lib.rd_kafka_outq_len(rk) != 0:
            raise RuntimeError(f"the record to {topic} was not delivered in 30 s")
    finally:
        lib.rd_kafka_destroy(rk)
