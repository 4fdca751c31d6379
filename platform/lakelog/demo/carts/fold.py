"""The cart aggregate's fold: a cart's commands, in log order, make its state.

Each command is checked against the state before it (`decide`). An accepted command is an event:
it `evolve`s the state and bumps the version. A rejected one leaves the state exactly as it was
and is kept, with its reason, as a rejection — never dropped. Every `snapshot_every` accepted
events the state is also kept as a snapshot, and an accepted checkout emits an order whose id is
derived from the cart and its version, so a replay emits the same id.

The order is (log partition, offset): the only order the log defines. All commands of a cart
carry one key (the user), so they are in one log partition; a command on a cart from another
user is rejected (`foreign_cart`). The fold is written as Spark column expressions
(``F.aggregate`` over a cart's sorted commands), so it runs in the JVM — no Python workers, no
lakelog installed on executors or behind Spark Connect — and it is a pure function of the prior
state and the commands, hence deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Literal, get_args

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.demo.carts.schemas import COMMAND, ITEM, MONEY, ORDER, REJECTION, STATE

Reason = Literal[
    "unknown_action",
    "cart_checked_out",
    "foreign_cart",
    "missing_product",
    "invalid_quantity",
    "invalid_price",
    "item_not_in_cart",
    "quantity_exceeds_cart",
    "empty_cart",
]
REASONS: tuple[Reason, ...] = get_args(Reason)
ACTIONS = ("add", "remove", "checkout")

#: Bounds that keep every amount inside ``decimal(18,2)`` and every quantity inside an int.
MAX_LINE_QUANTITY = 10_000
MAX_UNIT_PRICE = 1_000_000

ACCUMULATOR = T.StructType(
    [
        T.StructField("state", STATE),
        T.StructField("snapshots", T.ArrayType(STATE)),
        T.StructField("rejections", T.ArrayType(REJECTION)),
        T.StructField("orders", T.ArrayType(ORDER)),
    ]
)


def _let(value: Column, body: Callable[[Column], Column]) -> Column:
    """`body(value)` with `value` bound to a lambda variable, so Spark evaluates it once."""
    return F.transform(F.array(value), body)[0]


def empty_state(cart_id: Column) -> Column:
    """A cart before its first event: open, no items, version 0 (so a new cart is an empty one)."""
    return F.struct(
        cart_id.alias("cart_id"),
        F.lit(None).alias("user_id"),
        F.lit(None).alias("session_id"),
        F.lit("open").alias("status"),
        F.array().alias("items"),
        F.lit(0).alias("total"),
        F.lit(0).alias("version"),
        F.lit(None).alias("partition"),
        F.lit(None).alias("opened_offset"),
        F.lit(None).alias("last_offset"),
        F.lit(None).alias("updated_time"),
    ).cast(STATE)


def held(state: Column, product_id: Column) -> Column:
    """Units of `product_id` in the cart (0 if none)."""
    same = F.filter(state["items"], lambda i: i["product_id"] == product_id)
    return F.aggregate(same, F.lit(0), lambda n, i: n + i["quantity"])


def total(items: Column) -> Column:
    return F.aggregate(
        items, F.lit(0).cast(MONEY), lambda a, i: (a + i["quantity"] * i["unit_price"]).cast(MONEY)
    )


def decide(state: Column, c: Column) -> Column:
    """``struct(reason, detail)`` why command `c` is rejected given `state`; null reason: accepted.

    The first rule that applies decides: an unknown action, a checked-out cart (nothing is
    accepted after a checkout), another user's cart, a malformed add or remove, then the rules
    that need the cart's contents.
    """
    action, product, quantity, price = c["action"], c["product_id"], c["quantity"], c["unit_price"]
    changes = action.isin("add", "remove")

    def given(units: Column) -> Column:
        after_add = units + quantity
        rules: list[tuple[Reason, Column, Column]] = [
            ("unknown_action", ~F.coalesce(action.isin(*ACTIONS), F.lit(False)),
             F.format_string("unknown action %s (expected add, remove or checkout)", action)),
            ("cart_checked_out", state["status"] == "checked_out",
             F.format_string("the cart was checked out at version %d", state["version"])),
            ("foreign_cart", (state["version"] > 0) & ~state["user_id"].eqNullSafe(c["user_id"]),
             F.format_string("the cart belongs to user %s", state["user_id"])),
            ("missing_product", changes & product.isNull(),
             F.format_string("%s needs a product_id", action)),
            ("invalid_quantity", changes & (quantity.isNull() | (quantity < 1)),
             F.format_string("quantity must be a positive integer, got %s", quantity)),
            ("invalid_quantity", (action == "add") & (after_add > MAX_LINE_QUANTITY),
             F.format_string("the cart would hold %d of %s, more than %d", after_add, product,
                             F.lit(MAX_LINE_QUANTITY))),
            ("invalid_price",
             (action == "add") & (price.isNull() | (price < 0) | (price > MAX_UNIT_PRICE)),
             F.format_string("unit_price must be an amount from 0 to %d, got %s",
                             F.lit(MAX_UNIT_PRICE), price)),
            ("item_not_in_cart", (action == "remove") & (units == 0),
             F.format_string("%s is not in the cart", product)),
            ("quantity_exceeds_cart", (action == "remove") & (quantity > units),
             F.format_string("remove %d of %s: the cart holds %d", quantity, product, units)),
            ("empty_cart", (action == "checkout") & (F.size(state["items"]) == 0),
             F.lit("checkout of an empty cart")),
        ]
        decision = F.struct(
            F.lit(None).cast("string").alias("reason"), F.lit(None).cast("string").alias("detail")
        )
        for name, applies, message in reversed(rules):
            rejected = F.struct(F.lit(name).alias("reason"), message.alias("detail"))
            decision = F.when(applies, rejected).otherwise(decision)
        return decision

    # As a long, so that a huge quantity is rejected instead of overflowing the int.
    return _let(held(state, product).cast("long"), given)


def _item(product_id: Column, quantity: Column, unit_price: Column) -> Column:
    return F.struct(
        product_id.alias("product_id"), quantity.alias("quantity"), unit_price.alias("unit_price")
    ).cast(ITEM)


def evolve(state: Column, c: Column) -> Column:
    """The state after accepted command `c`.

    An add of a product already in the cart adds to its line and prices the line at the add's
    price (the price the shopper last saw); a remove of a line's last unit removes the line.
    """
    items, product, quantity = state["items"], c["product_id"], c["quantity"]

    def same(i: Column) -> Column:
        return i["product_id"] == product

    added = F.when(
        F.exists(items, same),
        F.transform(
            items,
            lambda i: F.when(
                same(i), _item(product, i["quantity"] + quantity, c["unit_price"])
            ).otherwise(i),
        ),
    ).otherwise(F.array_sort(F.array_append(items, _item(product, quantity, c["unit_price"]))))
    removed = F.filter(
        F.transform(
            items,
            lambda i: F.when(
                same(i), _item(product, i["quantity"] - quantity, i["unit_price"])
            ).otherwise(i),
        ),
        lambda i: i["quantity"] > 0,
    )
    changed = (
        F.when(c["action"] == "add", added)
        .when(c["action"] == "remove", removed)
        .otherwise(items)
    )
    opening = state["version"] == 0

    def first(field: str, command_field: str) -> Column:
        return F.when(opening, c[command_field]).otherwise(state[field]).alias(field)

    return _let(
        changed,
        lambda new_items: F.struct(
            state["cart_id"].alias("cart_id"),
            first("user_id", "user_id"),
            first("session_id", "session_id"),
            F.when(c["action"] == "checkout", F.lit("checked_out"))
            .otherwise(state["status"])
            .alias("status"),
            new_items.alias("items"),
            total(new_items).alias("total"),
            (state["version"] + 1).alias("version"),
            first("partition", "partition"),
            first("opened_offset", "offset"),
            c["offset"].alias("last_offset"),
            c["event_time"].alias("updated_time"),
        ).cast(STATE),
    )


def order_id(cart_id: Column, version: Column) -> Column:
    """Derived from the cart and its version: a replayed checkout emits the same order id."""
    return F.concat(F.lit("o:"), cart_id, F.lit(":"), version.cast("string"))


def _order(state: Column, c: Column) -> Column:
    return F.struct(
        order_id(state["cart_id"], state["version"]).alias("order_id"),
        state["cart_id"].alias("cart_id"),
        state["user_id"].alias("user_id"),
        state["session_id"].alias("session_id"),
        state["items"].alias("items"),
        state["total"].alias("total"),
        state["version"].alias("version"),
        c["event_time"].alias("checkout_time"),
        c["partition"].alias("partition"),
        c["offset"].alias("offset"),
    ).cast(ORDER)


def _rejection(state: Column, c: Column, decision: Column, topic: str) -> Column:
    return F.struct(
        F.lit(topic).alias("topic"),
        c["partition"].alias("partition"),
        c["offset"].alias("offset"),
        c["event_id"].alias("event_id"),
        state["cart_id"].alias("cart_id"),
        c["user_id"].alias("user_id"),
        c["action"].alias("action"),
        c["product_id"].alias("product_id"),
        c["quantity"].alias("quantity"),
        decision["reason"].alias("reason"),
        decision["detail"].alias("detail"),
        state["version"].alias("cart_version"),
        c["event_time"].alias("event_time"),
    ).cast(REJECTION)


def step(acc: Column, c: Column, *, topic: str, snapshot_every: int) -> Column:
    """One command folded into the accumulator (state, snapshots, rejections, orders)."""
    before = acc["state"]

    def decided(decision: Column) -> Column:
        accepted = decision["reason"].isNull()

        def applied(after: Column) -> Column:
            snapshot = accepted & (after["version"] % snapshot_every == 0)
            checkout = accepted & (c["action"] == "checkout")
            return F.struct(
                after.alias("state"),
                F.when(snapshot, F.array_append(acc["snapshots"], after))
                .otherwise(acc["snapshots"])
                .alias("snapshots"),
                F.when(accepted, acc["rejections"])
                .otherwise(
                    F.array_append(acc["rejections"], _rejection(before, c, decision, topic))
                )
                .alias("rejections"),
                F.when(checkout, F.array_append(acc["orders"], _order(after, c)))
                .otherwise(acc["orders"])
                .alias("orders"),
            ).cast(ACCUMULATOR)

        return _let(F.when(accepted, evolve(before, c)).otherwise(before), applied)

    return _let(decide(before, c), decided)


def commands(records: DataFrame) -> DataFrame:
    """A cart topic's records as ``(cart_id, command)``, prices made exact.

    A price that does not fit ``decimal(18,2)`` becomes null, so its add is rejected as
    `invalid_price` instead of failing the batch.
    """
    fields = [
        F.col("unit_price").try_cast(MONEY).alias(f.name) if f.name == "unit_price"
        else F.col(f.name).cast(f.dataType).alias(f.name)
        for f in COMMAND.fields
    ]
    return records.select("cart_id", F.struct(*fields).alias("command"))


def per_cart(commands: DataFrame) -> DataFrame:
    """``(cart_id, commands)``: each cart's commands as an array in (partition, offset) order."""
    return commands.groupBy("cart_id").agg(
        F.array_sort(F.collect_list("command")).alias("commands")
    )


def fold_commands(start: Column, commands: Column, *, topic: str, snapshot_every: int) -> Column:
    """The accumulator (`ACCUMULATOR`) after folding the array `commands` onto state `start`."""
    zero = F.struct(
        start.alias("state"),
        F.array().alias("snapshots"),
        F.array().alias("rejections"),
        F.array().alias("orders"),
    ).cast(ACCUMULATOR)
    return F.aggregate(
        commands, zero, lambda acc, c: step(acc, c, topic=topic, snapshot_every=snapshot_every)
    )


def fold(
    commands: DataFrame, prior: DataFrame, *, topic: str, snapshot_every: int
) -> DataFrame:
    """Per cart of `commands`: ``prior_version`` and ``result`` (the folded accumulator).

    `prior` holds stored states (`STATE` rows) of some carts; a cart without one starts empty.
    """
    stored = prior.select("cart_id", F.struct(*STATE.fieldNames()).cast(STATE).alias("prior"))
    return per_cart(commands).join(stored, "cart_id", "left").select(
        "cart_id",
        F.coalesce(F.col("prior.version"), F.lit(0).cast("long")).alias("prior_version"),
        _folded(type(commands), topic, snapshot_every).alias("result"),
    )


@lru_cache(maxsize=16)
def _folded(frames: type, topic: str, snapshot_every: int) -> Column:
    """`fold_commands` of a joined cart row (``prior``, ``cart_id``, ``commands``), built once per
    kind of DataFrame (classic or Spark Connect, whose columns differ) and fold settings: on a
    classic session each of the expression's hundreds of nodes is a call into the JVM (about
    0.1 s a batch). A column is an expression, valid in any session of its kind."""
    start = F.coalesce(F.col("prior"), empty_state(F.col("cart_id")))
    return fold_commands(start, F.col("commands"), topic=topic, snapshot_every=snapshot_every)


def states(folded: DataFrame) -> DataFrame:
    """The carts whose state changed (at least one accepted event), as `STATE` rows."""
    return folded.where(F.col("result.state.version") > F.col("prior_version")).select(
        "result.state.*"
    )


def snapshots(folded: DataFrame) -> DataFrame:
    return folded.select(F.explode("result.snapshots").alias("s")).select("s.*")


def rejections(folded: DataFrame) -> DataFrame:
    return folded.select(F.explode("result.rejections").alias("r")).select("r.*")


def orders(folded: DataFrame) -> DataFrame:
    return folded.select(F.explode("result.orders").alias("o")).select("o.*")
