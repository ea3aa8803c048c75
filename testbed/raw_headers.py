"""Writing a record whose header name is not UTF-8, as any producer on librdkafka's C API
(or a hand-made produce request) may: confluent-kafka's ``Producer`` takes header names
as ``str`` only. Kafka carries a header name as bytes and checks nothing of them.

Through ``ctypes``, on the librdkafka that confluent-kafka's wheel ships
(``rd_kafka_produceva``, whose header names are NUL-terminated bytes).
"""

from __future__ import annotations

import ctypes
from functools import cache
from pathlib import Path

import confluent_kafka

# rd_kafka_vtype_t
_END, _TOPIC, _PARTITION, _VALUE, _KEY, _HEADER = 0, 1, 3, 4, 5, 9
_PRODUCER = 0  # rd_kafka_type_t


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
    return lib


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
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for name, setting in ((b"bootstrap.servers", bootstrap.encode()), (b"acks", b"all")):
        if lib.rd_kafka_conf_set(conf, name, setting, err, len(err)) != 0:
            raise RuntimeError(err.value.decode())
    rk = lib.rd_kafka_new(_PRODUCER, conf, err, len(err))
    if not rk:
        raise RuntimeError(err.value.decode())
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
