"""Typed state: ``Computation[S]`` hands its calls a ``Context[S]``, so mypy checks
``ctx.state.get()`` and ``ctx.state.set()`` in user code; the state's codec follows from
``S`` (``codecs.codec_for``) unless ``state_codec`` names another; the older declaration
(a codec in ``state``) still works, and warns."""

from __future__ import annotations

import dataclasses
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pydantic
import pytest
from mypy import api as mypy_api

from mwcore import AvroCodec, Computation, Context, DataclassCodec, Input, JsonCodec, Output, Record
from mwcore.api.codecs import PydanticCodec
from mwcore.api.computation import state_codec_of, state_type
from mwcore.serde.avro import SchemaRegistry
from mwcore.testing import Harness

EVENT = {"type": "record", "name": "t.Event", "fields": [{"name": "n", "type": "long"}]}
SRC = Path(__file__).resolve().parents[1] / "src"


@dataclasses.dataclass
class Inner:
    seen: list[int] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Tally:
    n: int = 0


class Model(pydantic.BaseModel):
    n: int = 0
    inner: Inner = Inner()  # a nested dataclass, validated back into one


class ByDataclass(Computation[Tally]):
    name = "by-dataclass"
    inputs = (Input("events", schema="t.Event"),)
    outputs = (Output("echoed", schema="t.Event"),)

    def process_record(self, ctx: Context[Tally], record: Record) -> None:
        st = ctx.state.get(Tally())
        st.n += record.value["n"]
        ctx.state.set(st)
        ctx.produce("echoed", {"n": st.n}, record.timestamp)


class ByModel(Computation[Model]):
    name = "by-model"
    inputs = (Input("events", schema="t.Event"),)
    outputs = (Output("echoed", schema="t.Event"),)

    def process_record(self, ctx: Context[Model], record: Record) -> None:
        st = ctx.state.get(Model())
        st.n += record.value["n"]
        st.inner.seen.append(record.value["n"])
        ctx.state.set(st)
        ctx.produce("echoed", {"n": st.n}, record.timestamp)


class ByDataclassAgain(ByDataclass):  # S is inherited
    name = "by-dataclass-again"


class Untyped(Computation):  # type: ignore[type-arg]
    name = "untyped"
    inputs = (Input("events", schema="t.Event"),)


class Explicit(Computation[dict[str, Any]]):
    name = "explicit"
    inputs = (Input("events", schema="t.Event"),)
    state_codec = AvroCodec("t.Event")


def _registry() -> SchemaRegistry:
    registry = SchemaRegistry()
    registry.add(EVENT)
    return registry


@pytest.mark.parametrize(
    "computation, codec, typ",
    [
        (ByDataclass, DataclassCodec, Tally),
        (ByModel, PydanticCodec, Model),
        (ByDataclassAgain, DataclassCodec, Tally),
        (Untyped, JsonCodec, None),
        (Explicit, AvroCodec, dict[str, Any]),
    ],
)
def test_the_codec_follows_from_the_state_type(computation: Any, codec: type, typ: Any) -> None:
    assert state_type(computation) == typ
    assert type(state_codec_of(computation)) is codec
    assert state_codec_of(computation) is state_codec_of(computation())  # one per class


@pytest.mark.parametrize("computation", [ByDataclass, ByModel])
def test_typed_state_round_trips_through_its_codec(computation: Any) -> None:
    h = Harness(computation, _registry())
    for n in (1, 2, 3):
        h.send("events", {"n": n}, n, key="k")
    assert h.values("echoed") == [{"n": 1}, {"n": 3}, {"n": 6}]
    (state,) = [h.state("k")]
    assert isinstance(state, Tally if computation is ByDataclass else Model)
    assert state.n == 6
    if isinstance(state, Model):
        assert state.inner == Inner([1, 2, 3])


def test_the_older_declaration_still_works_and_warns() -> None:
    with pytest.warns(DeprecationWarning, match=r"Old\.state = DataclassCodec\(\.\.\.\) is deprecated"):

        class Old(Computation):  # type: ignore[type-arg]
            name = "old"
            inputs = (Input("events", schema="t.Event"),)
            outputs = (Output("echoed", schema="t.Event"),)
            state = DataclassCodec(Tally)

            def process_record(self, ctx: Context[Any], record: Record) -> None:
                st = ctx.state.get(Tally())
                st.n += 1
                ctx.state.set(st)

    assert type(state_codec_of(Old)) is DataclassCodec
    h = Harness(Old, _registry())
    h.send("events", {"n": 1}, 1, key="k")
    assert h.state("k") == Tally(1)


def test_the_new_declaration_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class New(Computation[Tally]):
            name = "new"
            inputs = (Input("events", schema="t.Event"),)

    assert type(state_codec_of(New)) is DataclassCodec


USER_CODE = """
    from __future__ import annotations

    from dataclasses import dataclass

    from mwcore import Computation, Context, Input, Record


    @dataclass
    class Tally:
        n: int = 0


    class Counter(Computation[Tally]):
        name = "counter"
        inputs = (Input("events", schema="t.Event"),)

        def process_record(self, ctx: Context[Tally], record: Record) -> None:
            st = ctx.state.get(Tally())
            st.n += 1
            ctx.state.set(st)
            {line}
"""


def _mypy(tmp_path: Path, line: str) -> tuple[str, int]:
    # a module of its own per check: mypy's cache knows a file by its size and mtime
    path = tmp_path / f"user_code_{len(list(tmp_path.iterdir()))}.py"
    path.write_text(textwrap.dedent(USER_CODE.format(line=line)))
    args = [str(path), "--strict", "--config-file", "/dev/null", "--follow-imports", "silent"]
    out, _, code = mypy_api.run([*args, "--cache-dir", str(tmp_path.parent / "mypy-cache")])
    return out, code


def test_mypy_catches_a_wrong_state_type_in_user_code(tmp_path: Path) -> None:
    out, code = _mypy(tmp_path, "ctx.state.set(st.n)")
    assert code == 1, out
    assert 'Argument 1 to "set" of "StateHandle" has incompatible type "int"; expected "Tally"' in out
    out, code = _mypy(tmp_path, "total: str = ctx.state.get(Tally()).n")
    assert code == 1 and 'expression has type "int", variable has type "str"' in out, out
    # the control: the same code with the state's own type passes
    out, code = _mypy(tmp_path, "total: int = ctx.state.get(Tally()).n")
    assert code == 0, out
