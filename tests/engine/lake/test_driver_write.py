"""Small writes collected and written by pyarrow give the table what a Spark write gives."""

from __future__ import annotations

from datetime import datetime, timezone

from deltalake import DeltaTable
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.testing import assertDataFrameEqual

from lakelog.lake import driver_write

SCHEMA = T.StructType([
    T.StructField("topic", T.StringType()),
    T.StructField("part", T.IntegerType()),
    T.StructField("id", T.LongType()),
    T.StructField("at", T.TimestampType()),
    T.StructField("amount", T.DecimalType(12, 2)),
    T.StructField("tags", T.MapType(T.StringType(), T.StringType())),
    T.StructField("items", T.ArrayType(T.StructType([T.StructField("sku", T.StringType()),
                                                     T.StructField("n", T.IntegerType())]))),
])
START = datetime(2026, 3, 1, tzinfo=timezone.utc)


def frame(spark, n: int, topic: str = "cdc.orders"):
    rows = [(topic, i % 3, i, START.replace(minute=i % 60), None if i % 5 == 0 else i * 1.25,
             {"k": str(i)}, [{"sku": f"s{i}", "n": i}]) for i in range(n)]
    df = spark.createDataFrame(rows, "topic string, part int, id long, at timestamp, "
                                     "amount double, tags map<string,string>, "
                                     "items array<struct<sku:string,n:int>>")
    return df.withColumn("amount", F.col("amount").cast("decimal(12,2)"))


def both(lake, spark, df, *, partition_by, per_file=None):
    """`df` written by Spark into table `spark_t` and from the driver into `arrow_t`."""
    for name, hint in (("spark_t", None), ("arrow_t", 100)):
        lake.create_table(name, SCHEMA, partition_by=partition_by)
        lake.write(lake.snapshot(name), df, max_records_per_file=per_file, rows_hint=hint)
    return lake.snapshot("spark_t"), lake.snapshot("arrow_t")


def described(snapshot):
    return sorted((tuple(sorted(f.partition_values.items())), f.num_records,
                   f.min_values.get("id"), f.max_values.get("id"), f.min_values.get("at"),
                   f.null_counts.get("amount"))
                  for f in snapshot.files())


def test_a_small_write_matches_a_spark_write(lake, spark):
    df = frame(spark, 30).coalesce(1)
    by_spark, by_arrow = both(lake, spark, df, partition_by=["topic", "part"], per_file=4)
    assertDataFrameEqual(lake.read(by_arrow), lake.read(by_spark))
    assert described(by_arrow) == described(by_spark)
    # files of at most 4 rows in the rows' order: each file a narrow range of ids
    assert all(f.num_records <= 4 for f in by_arrow.files())
    assert all(f.max_values["id"] - f.min_values["id"] <= 9 for f in by_arrow.files())
    assert not any("topic" in f.path.rsplit("/", 1)[-1] for f in by_arrow.files())
    # any Delta reader sees the same rows, partition columns included
    spark_rows = DeltaTable(lake.uri("spark_t")).to_pyarrow_table().sort_by("id")
    arrow_rows = DeltaTable(lake.uri("arrow_t")).to_pyarrow_table().sort_by("id")
    assert arrow_rows.select(spark_rows.column_names).to_pylist() == spark_rows.to_pylist()


def test_a_non_plain_partition_value_and_no_rows(lake, spark):
    odd = frame(spark, 6, topic="a:b")  # Spark escapes it: the write goes through Spark
    table, schema = driver_write.collect(odd)
    assert schema == odd.schema and table.num_rows == 6
    assert driver_write.groups(table, ["topic"]) is None
    lake.create_table("odd", SCHEMA, partition_by=["topic"])
    lake.write(lake.snapshot("odd"), odd.coalesce(1), rows_hint=6)
    (written,) = lake.snapshot("odd").files()
    assert written.path.rsplit("/", 1)[-1].startswith("part-00000-")  # Spark's file name
    by_spark, by_arrow = both(lake, spark, frame(spark, 6), partition_by=["topic"])
    empty = frame(spark, 6).where("id < 0")
    version = lake.snapshot("arrow_t").version
    assert lake.write(lake.snapshot("arrow_t"), empty, rows_hint=0) == version + 1
    assert len(lake.snapshot("arrow_t").files()) == len(by_arrow.files())


def test_a_small_write_widens_columns_as_a_spark_write_does(lake, spark):
    narrow = frame(spark, 8).withColumn("id", F.col("id").cast("int")).coalesce(1)  # into bigint
    by_spark, by_arrow = both(lake, spark, narrow, partition_by=["topic"])
    assert described(by_arrow) == described(by_spark)
    arrow_rows = DeltaTable(lake.uri("arrow_t")).to_pyarrow_table()
    assert str(arrow_rows.schema.field("id").type) == "int64"
    assertDataFrameEqual(lake.read(by_arrow), lake.read(by_spark))


def test_only_a_known_small_write_is_collected():
    assert driver_write.is_small_write(0) and driver_write.is_small_write(50_000)
    assert not driver_write.is_small_write(None)
    assert not driver_write.is_small_write(driver_write.SMALL_WRITE_ROWS + 1)


def test_frames_collected_together_are_each_collected_alone(spark):
    """`collect_together` gives each frame the rows (in its order), values and Spark schema
    that collecting it alone gives: fields that may not be null inside structs, arrays and
    maps (null in the other frames' rows of the union), timestamps, decimals, no rows."""
    nested = spark.range(6).select(
        F.struct(F.col("id").alias("n"), F.array(F.col("id")).alias("ids")).alias("s"),
        F.create_map(F.lit("k"), F.struct(F.col("id").alias("v"))).alias("m"),
        F.lit(START).alias("at"))
    frames = [frame(spark, 12).orderBy(F.col("id").desc()), nested,
              spark.range(0).withColumnRenamed("id", "nothing"), frame(spark, 3).select("id")]
    together = driver_write.collect_together(frames)
    assert len(together) == len(frames)
    for (table, schema), df in zip(together, frames):
        alone, alone_schema = driver_write.collect(df)
        assert schema == alone_schema
        assert table.column_names == alone.column_names
        assert table.cast(alone.schema).equals(alone)  # in a classic session: all nullable
    assert together[0][0]["id"].to_pylist() == list(range(11, -1, -1))
    assert together[1][0]["s"].to_pylist()[2] == {"n": 2, "ids": [2]}
