"""A parsed struct's fields read one by one against flattened once, interpreted (issue 12).

Ingest parsed each line with `from_json` into a struct and read a dozen of its fields: for the
null checks of the required fields and for the record's columns (it flattens them as it parses
since 8c0ccf4, `lakelog.log.records.parse_lines`). lakelog runs Spark without
generated code (docs/spark.md). Interpreted, a read of a field of a struct stored in a row
(`GetStructField` on an `UnsafeRow`) asks for the field type's physical type, which Spark 4.2
resolves through its types framework by reading a SQL setting, building a read-only SQL conf of
the task each time; and a field read twice (its value and its null check) goes through the
projection's common-subexpression cache. Both showed in a Java Flight Recorder profile of the
ingest. This measures the two on their own, side by side in one classic `local[2]` session:
`--rows` JSON lines of
`--fields` string fields, kept in memory, parsed and returned as Arrow with each field and
whether any is null, the fields read with `col("s")[name]` (`getfield`) or flattened once by
`inline(array(s))` (`inline`), alternating, `--rounds` rounds of each after a warm one.
Prints JSON: the seconds of each round and the medians, and the pyspark version.

    python benchmarks/bench_struct_fields.py --rows 200000 --fields 12 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import pyspark
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.spark.session import create_session


def parsed_lines(spark: SparkSession, rows: int, fields: list[str]) -> DataFrame:
    lines = [(json.dumps({f: f"v{i}-{j}" for j, f in enumerate(fields)}),) for i in range(rows)]
    df = spark.createDataFrame(lines, "value string").repartition(2).localCheckpoint(eager=True)
    schema = T.StructType([T.StructField(f, T.StringType()) for f in fields])
    return df.select(F.from_json("value", schema).alias("s"))


def any_null(columns: list) -> object:
    found = columns[0].isNull()
    for c in columns[1:]:
        found = found | c.isNull()
    return found


def by_field(parsed: DataFrame, fields: list[str]) -> DataFrame:
    s = F.col("s")
    return parsed.select(*[s[f].alias(f) for f in fields],
                         any_null([s[f] for f in fields]).alias("any_null"))


def flattened(parsed: DataFrame, fields: list[str]) -> DataFrame:
    flat = parsed.select(F.inline(F.array("s")))
    return flat.select(*fields, any_null([F.col(f) for f in fields]).alias("any_null"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--fields", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    spark = create_session(master="local[2]", app_name="bench-struct-fields")
    fields = [f"f{i}" for i in range(args.fields)]
    parsed = parsed_lines(spark, args.rows, fields)
    ways = {"getfield": by_field, "inline": flattened}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(args.rounds + 1):
        for name, way in ways.items() if i % 2 == 0 else reversed(ways.items()):
            started = time.perf_counter()
            table = way(parsed, fields).toArrow()
            took = time.perf_counter() - started
            assert table.num_rows == args.rows
            if i:  # the first round warms both up
                seconds[name].append(round(took, 3))
    print(json.dumps({
        "pyspark": pyspark.__version__, "rows": args.rows, "fields": args.fields,
        "seconds": seconds,
        "median_s": {name: statistics.median(v) for name, v in seconds.items()},
    }, indent=1))
    spark.stop()
    os._exit(0)  # the JVM's shutdown is not part of the figures


if __name__ == "__main__":
    main()
