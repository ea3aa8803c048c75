"""The commit witness's writes: one in flight, the rest coalesced, failures written again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mwcore.runtime.witness import Witness, decode
from mwcore.transport.consumer import Offset, Part


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Coordinator:
    """Takes offset commits and answers them when told (``answer``)."""

    def __init__(self, witness: Witness) -> None:
        self.witness = witness
        self.writes: list[list[Offset]] = []
        self.refuse = False

    def commit(self, offsets: Sequence[Offset], asynchronous: bool = True) -> bool:
        if self.refuse:
            return False
        self.writes.append(list(offsets))
        return True

    def committed(self, parts: Iterable[Part], timeout: float = 10.0) -> list[Offset]:
        return []

    def answer(self, ok: bool = True) -> None:
        self.witness.on_committed(self.writes[-1] if ok else [])


def counts(offsets: list[Offset]) -> dict[int, int]:
    return {o.partition: decode(o.metadata) for o in offsets}


def test_wants_made_while_a_write_is_in_flight_go_in_one_write_after_its_answer() -> None:
    clock = Clock()
    w = Witness(["in"], clock=clock)
    kafka = Coordinator(w)
    w.want(0, 1, {"in:0": 10})
    w.flush(kafka)
    for commits in (2, 3, 4):  # three more commits of interval 0, one of interval 1
        w.want(0, commits, {"in:0": 10 * commits})
        w.flush(kafka)
    w.want(1, 7, {"in:1": 5})
    w.flush(kafka)
    assert [counts(x) for x in kafka.writes] == [{0: 1}]  # nothing sent behind the first
    kafka.answer()
    assert w.confirmed == {0: 1} and w.newly_confirmed == {0}
    w.flush(kafka)
    assert counts(kafka.writes[-1]) == {0: 4, 1: 7} and kafka.writes[-1][0].offset == 40
    kafka.answer()
    assert w.confirmed == {0: 4, 1: 7}


def test_a_failed_write_is_written_again_and_a_newer_want_wins() -> None:
    clock = Clock()
    w = Witness(["in"], clock=clock, retry_s=0.05)
    kafka = Coordinator(w)
    w.want(0, 1, {"in:0": 10})
    w.want(1, 1, {"in:1": 10})
    w.flush(kafka)
    w.want(1, 2, {"in:1": 20})
    kafka.answer(ok=False)  # e.g. a rebalance in progress
    assert w.confirmed == {}
    w.flush(kafka)
    assert len(kafka.writes) == 1  # backs off first
    clock.t += 0.05
    w.flush(kafka)
    assert counts(kafka.writes[-1]) == {0: 1, 1: 2}
    kafka.answer()
    assert w.confirmed == {0: 1, 1: 2}


def test_a_write_that_cannot_be_made_is_kept() -> None:
    clock = Clock()
    w = Witness(["in"], clock=clock)
    kafka = Coordinator(w)
    kafka.refuse = True
    w.want(0, 3, {"in:0": 10})
    w.flush(kafka)
    kafka.refuse = False
    clock.t += 1
    w.flush(kafka)
    assert counts(kafka.writes[-1]) == {0: 3}


def test_a_write_never_answered_stops_blocking_after_the_timeout() -> None:
    clock = Clock()
    w = Witness(["in"], clock=clock, answer_timeout_s=10)
    kafka = Coordinator(w)
    w.want(0, 1, {"in:0": 10})
    w.flush(kafka)
    w.want(0, 2, {"in:0": 20})
    clock.t += 9.9
    w.flush(kafka)
    assert len(kafka.writes) == 1
    clock.t += 0.2
    w.flush(kafka)
    assert counts(kafka.writes[-1]) == {0: 2}


def test_a_forgotten_interval_is_not_written_again() -> None:
    w = Witness(["in"], clock=Clock())
    kafka = Coordinator(w)
    w.want(0, 1, {"in:0": 10})
    w.flush(kafka)
    w.forget(0)  # revoked meanwhile
    kafka.answer(ok=False)
    w.flush(kafka)
    assert len(kafka.writes) == 1 and w.confirmed == {}


def test_a_transactional_witness_is_marked_and_its_mark_is_signed() -> None:
    from mwcore.api.signing import Signer
    from mwcore.runtime.witness import decode_mark, encode

    assert decode_mark(encode(7, transactional=True)) == (7, True)
    assert decode_mark(encode(7, transactional=True) + "\x00") == (7, True)  # as a transaction wrote it
    assert decode_mark(encode(7)) == (7, False)
    signer = Signer("s" * 32)
    marked = encode(7, signer, "t", 0, transactional=True)
    assert decode_mark(marked, signer, "t", 0) == (7, True)
    count, _, mac = marked.removeprefix("mw:").partition(":")
    assert decode_mark(f"mw:{count.removesuffix('t')}:{mac}", signer, "t", 0) == (
        0,
        False,
    )  # the mark is in the MAC
