"""Row types of the cart aggregate: its state, rejected commands and the orders checkouts emit.

Money is exact: ``decimal(18,2)``, like the demo's product statistics. A cart's items are kept
sorted by product id, so two equal carts are equal rows and can be compared as values.
"""

from __future__ import annotations

from pyspark.sql import types as T

MONEY = T.DecimalType(18, 2)

ITEM = T.StructType(
    [
        T.StructField("product_id", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("unit_price", MONEY),
    ]
)

#: One cart as of its last accepted event; `cart_state` and `cart_snapshots` rows.
STATE = T.StructType(
    [
        T.StructField("cart_id", T.StringType()),
        T.StructField("user_id", T.StringType()),  # the cart's owner: the user who opened it
        T.StructField("session_id", T.StringType()),
        T.StructField("status", T.StringType()),  # open | checked_out
        T.StructField("items", T.ArrayType(ITEM)),
        T.StructField("total", MONEY),
        T.StructField("version", T.LongType()),  # accepted events so far
        T.StructField("partition", T.IntegerType()),  # the log partition of its events
        T.StructField("opened_offset", T.LongType()),  # offset of its first accepted event
        T.StructField("last_offset", T.LongType()),  # offset of its last accepted event
        T.StructField("updated_time", T.TimestampType()),  # event time of that event
    ]
)

#: A command as the fold reads it; (partition, offset) first, so sorting orders by log position.
COMMAND = T.StructType(
    [
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("event_id", T.StringType()),
        T.StructField("event_time", T.TimestampType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("session_id", T.StringType()),
        T.StructField("action", T.StringType()),
        T.StructField("product_id", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("unit_price", MONEY),
    ]
)

#: A command the cart refused, with the record's position in the log and why.
REJECTION = T.StructType(
    [
        T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
        T.StructField("event_id", T.StringType()),
        T.StructField("cart_id", T.StringType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("action", T.StringType()),
        T.StructField("product_id", T.StringType()),
        T.StructField("quantity", T.IntegerType()),
        T.StructField("reason", T.StringType()),  # one of `fold.REASONS`
        T.StructField("detail", T.StringType()),
        T.StructField("cart_version", T.LongType()),  # the version the command was checked against
        T.StructField("event_time", T.TimestampType()),
    ]
)

#: The order an accepted checkout emits; `partition`/`offset` locate the checkout command.
ORDER = T.StructType(
    [
        T.StructField("order_id", T.StringType()),
        T.StructField("cart_id", T.StringType()),
        T.StructField("user_id", T.StringType()),
        T.StructField("session_id", T.StringType()),
        T.StructField("items", T.ArrayType(ITEM)),
        T.StructField("total", MONEY),
        T.StructField("version", T.LongType()),  # the cart's version after the checkout
        T.StructField("checkout_time", T.TimestampType()),
        T.StructField("partition", T.IntegerType()),
        T.StructField("offset", T.LongType()),
    ]
)

#: `cart_orders` rows: an order and the consumer batch that decided it (the relay's cursor).
OUTBOX = T.StructType([*ORDER.fields, T.StructField("batch", T.LongType())])

#: Payload of the orders topic that downstream consumers read (keyed by user, like the shop).
ORDER_EVENT = T.StructType(
    [
        T.StructField("event_id", T.StringType(), False),  # the order id
        T.StructField("user_id", T.StringType(), False),
        T.StructField("session_id", T.StringType()),
        T.StructField("order_id", T.StringType(), False),
        T.StructField("cart_id", T.StringType(), False),
        T.StructField("items", T.ArrayType(ITEM), False),
        T.StructField("total", MONEY, False),
        T.StructField("checkout_time", T.TimestampType(), False),
    ]
)
