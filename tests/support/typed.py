"""Typed computations for the tests (``serde/typed.py``): orders in, each customer's
totals out, as dataclasses and as pydantic models; their schemas are in
``tests/support/schemas`` (``SCHEMAS``), apart from the project's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from mwcore import Computation, Context, Input, Output, Record

SCHEMAS = Path(__file__).parent / "schemas"


@dataclass
class Line:
    sku: str
    qty: int
    price: float


@dataclass
class Order:
    id: str
    customer: str
    lines: list[Line]
    note: str | None = None


@dataclass
class Biggest:
    order: str
    amount: float


@dataclass
class OrderTotal:
    customer: str
    orders: int
    total: float
    biggest: Biggest | None = None


@dataclass
class Tally:
    orders: int = 0
    total: float = 0.0
    biggest_order: str = ""
    biggest_amount: float = 0.0


def amount(order: Order) -> float:
    return round(sum(line.qty * line.price for line in order.lines), 2)


class TypedTotals(Computation[Tally]):
    """Each customer's order count, total and biggest order, on dataclasses end to end."""

    name = "typed_totals"
    inputs = (Input("orders", schema="mw.tests.Order", type=Order),)
    outputs = (Output("order_totals", schema="mw.tests.OrderTotal", type=OrderTotal),)

    def process_record(self, ctx: Context[Tally], record: Record) -> None:
        order: Order = record.value
        tally = ctx.state.get(Tally())
        spent = amount(order)
        tally.orders += 1
        tally.total = round(tally.total + spent, 2)
        if tally.orders == 1 or spent > tally.biggest_amount:
            tally.biggest_order, tally.biggest_amount = order.id, spent
        ctx.state.set(tally)
        biggest = Biggest(tally.biggest_order, tally.biggest_amount)
        ctx.produce(
            "order_totals", OrderTotal(order.customer, tally.orders, tally.total, biggest), record.timestamp
        )


class LineModel(BaseModel):
    sku: str
    qty: int
    price: float


class OrderModel(BaseModel):
    id: str
    customer: str
    lines: list[LineModel]
    note: str | None = None


class BiggestModel(BaseModel):
    order: str
    amount: float


class OrderTotalModel(BaseModel):
    customer: str
    orders: int
    total: float
    biggest: BiggestModel | None = None


class TallyModel(BaseModel):
    orders: int = 0
    total: float = 0.0
    biggest: BiggestModel | None = None


class ModelTotals(Computation[TallyModel]):
    """The same totals on pydantic models: records, productions and state."""

    name = "model_totals"
    inputs = (Input("orders", schema="mw.tests.Order", type=OrderModel),)
    outputs = (Output("order_totals", schema="mw.tests.OrderTotal", type=OrderTotalModel),)

    def process_record(self, ctx: Context[TallyModel], record: Record) -> None:
        order: OrderModel = record.value
        tally = ctx.state.get(TallyModel())
        spent = round(sum(line.qty * line.price for line in order.lines), 2)
        tally.orders += 1
        tally.total = round(tally.total + spent, 2)
        if tally.biggest is None or spent > tally.biggest.amount:
            tally.biggest = BiggestModel(order=order.id, amount=spent)
        ctx.state.set(tally)
        total = OrderTotalModel(
            customer=order.customer, orders=tally.orders, total=tally.total, biggest=tally.biggest
        )
        ctx.produce("order_totals", total, record.timestamp)


@dataclass
class WrongLine:
    sku: str
    qty: str  # the schema's qty is an int
    price: float


@dataclass
class WrongOrder:
    id: str
    customer: str
    lines: list[WrongLine]
    note: str | None = None


class MismatchedTotals(TypedTotals):
    """Declares an input type that does not match its schema: refused at start."""

    name = "mismatched_totals"
    inputs = (Input("orders", schema="mw.tests.Order", type=WrongOrder),)
