"""Debezium's encodings of column values, decoded when a changelog row is ingested.

Debezium's JSON converter (``schemas.enable=false``) writes some column types in other forms than
lakelog's own capture, depending on connector settings, and without a schema in the message the
declared row type must say what each value is:

- DECIMAL / NUMERIC — ``decimal.handling.mode=precise`` (Debezium's default): base64 of the
  unscaled value's big-endian two's-complement bytes, the scale being the declared column's
  (decoded up to 8 bytes, i.e. precision 18);
  ``string``: a string; ``double``: a JSON number.
- TIMESTAMP — ``time.precision.mode=adaptive`` (the default): epoch milliseconds
  (``io.debezium.time.Timestamp``, precision 0–3), microseconds (``MicroTimestamp``, 4–6) or
  nanoseconds (``NanoTimestamp``, 7–9); ``connect``: epoch milliseconds; TIMESTAMPTZ: an ISO-8601
  string (``ZonedTimestamp``), as lakelog's capture writes every timestamp.
- DATE — days since the epoch (``io.debezium.time.Date``), or an ISO date.

Such columns are parsed as text and decoded here, whichever of these forms a value has. An
integer epoch's unit is told by its magnitude: at least 10^17 is nanoseconds, at least 10^14
microseconds, anything else milliseconds — right for every instant from 1973 to 5138 (and for
milliseconds before 1973). A value that decodes in none of the forms makes its record a dead
letter that names the column and the value. One case is ambiguous: a ``precise`` value whose
base64 text is all digits (possible only for some negative values) is read as a number.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.log.topics import Decoder

NUMBER = r"^[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?$"
INTEGER = r"^[+-]?[0-9]+$"
BASE64 = r"^[A-Za-z0-9+/]+={0,2}$"
#: The widest unscaled value decoded from bytes: 8 bytes, a signed 64-bit integer (precision 18).
MAX_BYTES = 8
NANOS, MICROS = 10**17, 10**14


def decodes(data_type: T.DataType) -> bool:
    return isinstance(data_type, (T.DecimalType, T.TimestampType, T.DateType))


def _unscaled(text: Column) -> Column:
    """The signed integer, as a decimal string, that base64 `text` encodes in big-endian two's
    complement (null: not base64, empty, or wider than 8 bytes)."""
    hexed = F.hex(F.try_to_binary(text, F.lit("base64")))
    negative = F.substr(hexed, F.lit(1), F.lit(1)).isin(*"89ABCDEF")
    extended = F.lpad(hexed, 16, F.when(negative, F.lit("F")).otherwise(F.lit("0")))
    fits = (F.length(hexed) >= 2) & (F.length(hexed) <= 2 * MAX_BYTES)
    return F.when(fits & text.rlike(BASE64), F.conv(extended, 16, -10))


def decimal(text: Column, data_type: T.DecimalType) -> Column:
    """A number or numeric string as is; otherwise base64 bytes of the unscaled value."""
    unscaled = _unscaled(text)
    plain = F.regexp_replace(unscaled, "^-", "")
    width = data_type.scale + 1  # at least one digit before the point (lpad would also cut)
    digits = F.when(F.length(plain) < width, F.lpad(plain, width, "0")).otherwise(plain)
    if data_type.scale:
        cut = F.length(digits) - data_type.scale
        digits = F.concat(
            F.substr(digits, F.lit(1), cut), F.lit("."), F.substr(digits, cut + 1, F.lit(38))
        )
    from_bytes = F.concat(F.when(unscaled.startswith("-"), F.lit("-")).otherwise(F.lit("")),
                          digits)
    return F.when(text.rlike(NUMBER), text).otherwise(from_bytes).try_cast(data_type)


def timestamp(text: Column) -> Column:
    """An ISO-8601 string, or an integer epoch in milliseconds, microseconds or nanoseconds."""
    epoch = text.try_cast("long")
    size = F.abs(epoch)
    micros = (
        F.when(size >= NANOS, F.floor(epoch.cast("decimal(20,0)") / F.lit(1000)).cast("long"))
        .when(size >= MICROS, epoch)
        .otherwise(F.try_multiply(epoch, F.lit(1000)))
    )
    return F.when(text.rlike(INTEGER), F.timestamp_micros(micros)).otherwise(
        text.try_cast("timestamp")
    )


def date(text: Column) -> Column:
    """An ISO date, or days since the epoch."""
    days = text.try_cast("int")
    return F.when(text.rlike(INTEGER), F.date_add(F.lit("1970-01-01").cast("date"), days)).otherwise(
        text.try_cast("date")
    )


def decode(text: Column, data_type: T.DataType) -> Column:
    if isinstance(data_type, T.DecimalType):
        return decimal(text, data_type)
    if isinstance(data_type, T.TimestampType):
        return timestamp(text)
    return date(text)


FORMS = {
    T.DecimalType: "a number, a numeric string or base64 bytes of the unscaled value",
    T.TimestampType: "an ISO-8601 time or epoch milliseconds, microseconds or nanoseconds",
    T.DateType: "an ISO date or days since the epoch",
}


def row_decoder(field: str, row: T.StructType) -> Decoder | None:
    """The decoder of a struct field holding a row of `row` (None: no column needs decoding)."""
    columns = [f for f in row.fields if decodes(f.dataType)]
    if not columns:
        return None
    wire = T.StructType([
        T.StructField(f.name, T.StringType() if decodes(f.dataType) else f.dataType, f.nullable)
        for f in row.fields
    ])

    def decoded(value: Column) -> Column:
        typed = F.struct(*[
            (decode(value[f.name], f.dataType) if decodes(f.dataType) else value[f.name])
            .alias(f.name)
            for f in row.fields
        ])
        return F.when(value.isNotNull(), typed)

    def problem(value: Column, decoded: Column) -> Column:
        found = F.lit(None).cast("string")
        for f in reversed(columns):
            text = value[f.name]
            bad = text.isNotNull() & decoded[f.name].isNull()
            message = F.concat(
                F.lit(f"{field}.{f.name}: "), F.substring(text, 1, 100),
                F.lit(f" is not a {f.dataType.simpleString()} ({FORMS[type(f.dataType)]})"),
            )
            found = F.when(bad, message).otherwise(found)
        return found

    return Decoder(field, wire, decoded, problem)
