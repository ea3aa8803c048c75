"""The windower in memory (mwcore.testing.Harness): a bucket's count comes out once the
watermark passes the bucket's end, in event-time order, and never twice."""

from __future__ import annotations

from mwcore.testing import Harness
from services.windower.computation import Windower


def query(q: str, lang: str = "en") -> dict[str, object]:
    return {"query": q, "lang": lang, "user": 7, "source_file": "f"}


def test_counts_come_out_when_the_watermark_passes_the_bucket() -> None:
    h = Harness(Windower)
    for ts, q in [(1_100, "a"), (1_900, "a"), (2_050, "a"), (1_500, "b"), (3_999, "b")]:
        h.send("queries", query(q), ts, key=q)
    assert h.output("window_counts") == []
    assert h.advance_watermark(2_000) == 2  # the 1-second buckets of a and b
    assert sorted((v["query"], v["bucket_start"], v["count"]) for v in h.values("window_counts")) == [
        ("a", 1_000, 2),
        ("b", 1_000, 1),
    ]
    h.finish()
    got = [(v["query"], v["bucket_start"], v["count"]) for v in h.values("window_counts")][2:]
    assert got == [("a", 2_000, 1), ("b", 3_000, 1)]  # event-time order
    assert h.keys() == [] and h.pending_timers() == 0  # state cleared with the last bucket
    assert all(
        p.timestamp == v["bucket_start"] + 999
        for p, v in zip(h.output("window_counts"), h.values("window_counts"), strict=True)
    )


def test_in_batch_a_record_archived_twice_is_counted_once() -> None:
    from mwcore import AvroSerde
    from mwcore.testing import Encoded, KeyRunner

    h = Harness(Windower)
    serde = AvroSerde(h.registry, "zeitgeist.Query")
    records = [
        Encoded("queries", "a", ts, bytes([i]) * 16, serde.encode(query("a")))
        for i, ts in enumerate((1_100, 1_200, 1_300))
    ]
    runner = KeyRunner(Windower, h.registry, end_ms=2_000)
    twice = [*records, records[1]]  # a batch re-sent after a crash: the same id again
    out = list(runner.run_key(twice))
    assert [AvroSerde(h.registry, "zeitgeist.WindowCount").decode(e.value)["count"] for e in out] == [3]
    assert runner.duplicates == 1
