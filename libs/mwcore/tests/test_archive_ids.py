"""Record ids of archive rows (``read_archive``'s decoder, on Arrow batches as Spark
hands them): the id header where there is one, else the id the runtime gives the record."""

from __future__ import annotations

import pyarrow as pa

from mwcore.api.ids import from_position
from mwcore.api.record import ID_HEADER
from mwcore.archive.spark.source import Decoder

HEADER = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def batch(headers: list[list[dict[str, object]] | None]) -> pa.RecordBatch:
    n = len(headers)
    columns = [
        pa.array(["t"] * n),
        pa.array(list(range(n)), pa.int32()),
        pa.array([10 + i for i in range(n)], pa.int64()),
        pa.array(headers, HEADER),
    ]
    return pa.RecordBatch.from_arrays(columns, names=["topic", "partition", "offset", "headers"])


def test_one_id_header_per_row_is_taken_as_it_is() -> None:
    rids = [bytes([i]) * 16 for i in range(3)]
    got = Decoder._ids(batch([[{"key": ID_HEADER, "value": r}] for r in rids])).to_pylist()
    assert got == rids


def test_rows_without_a_valid_id_get_the_runtimes_id_and_the_first_header_wins() -> None:
    good, other = b"\x01" * 16, b"\x02" * 16
    rows = batch(
        [
            [
                {"key": "x", "value": b"y"},
                {"key": ID_HEADER, "value": good},
                {"key": ID_HEADER, "value": other},
            ],
            None,  # no headers at all
            [{"key": ID_HEADER, "value": b"short"}],  # not an id: wrong length
            [],
        ]
    )
    got = Decoder._ids(rows).to_pylist()
    assert got == [good, from_position("t", 1, 11), from_position("t", 2, 12), from_position("t", 3, 13)]
