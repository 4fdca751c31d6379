"""A table that keeps a column's nulls apart: no data file holds rows of both kinds, whichever
way the rows are written (collected here and written by pyarrow, or written by Spark)."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.consumers import Output
from lakelog.errors import ConfigError
from lakelog.lake.nulls_apart import NULLS_APART, flattened
from lakelog.lake.upsert import write_clustered

SCHEMA = T.StructType([T.StructField("p", T.IntegerType()), T.StructField("k", T.LongType()),
                       T.StructField("closed", T.LongType())])


@pytest.fixture(params=["held", "spark"])
def rows_hint(request):
    """Few rows, which the lake collects and writes itself, or a write by Spark."""
    return 10 if request.param == "held" else None


def rows(spark, n=40):
    return spark.range(n).select(
        (F.col("id") % 2).cast("int").alias("p"), F.col("id").alias("k"),
        F.when(F.col("id") % 3 != 0, F.col("id") * 10).alias("closed"))


@pytest.mark.parametrize("partitioned", [False, True])
def test_no_file_holds_nulls_and_values_together(lake, spark, rows_hint, partitioned):
    lake.create_table("t", SCHEMA, partition_by=["p"] if partitioned else [],
                      properties={NULLS_APART: "closed"})
    df = rows(spark)
    lake.write(lake.snapshot("t"), df.coalesce(1).sortWithinPartitions("k"), rows_hint=rows_hint,
               max_records_per_file=5)
    snapshot = lake.snapshot("t")
    files = snapshot.files()
    assert all(f.null_counts["closed"] in (0, f.num_records) for f in files)
    assert {f.null_counts["closed"] == 0 for f in files} == {True, False}
    assert all(f.num_records <= 5 for f in files)
    assert all("_lakelog_null" not in f.path for f in files)
    if partitioned:
        assert {int(f.partition_values["p"]) for f in files} == {0, 1}
    assert sorted(map(tuple, lake.read(snapshot).select("p", "k", "closed").collect())) == sorted(
        map(tuple, df.collect()))


def test_a_table_without_the_property_mixes_them(lake, spark, rows_hint):
    lake.create_table("t", SCHEMA)
    lake.write(lake.snapshot("t"), rows(spark).coalesce(1), rows_hint=rows_hint)
    (only,) = lake.snapshot("t").files()
    assert 0 < only.null_counts["closed"] < only.num_records


def test_a_flag_folder_goes_into_the_file_name():
    assert flattened("_lakelog_null=true/part-0.parquet") == "null-part-0.parquet"
    assert flattened("p=1/_lakelog_null=false/part-0.parquet") == "p=1/set-part-0.parquet"
    assert flattened("p=1/part-0.parquet") == "p=1/part-0.parquet"


def test_a_clustered_write_gives_each_kind_files_of_key_ranges(lake, spark):
    # Spark writes it in several tasks (range-partitioned by the null flag, then the key).
    lake.create_table("t", SCHEMA, properties={NULLS_APART: "closed"})
    write_clustered(lake, lake.snapshot("t"), rows(spark, 400), keys=("k",), rows_per_file=50,
                    rows=400)
    files = lake.snapshot("t").files()
    assert all(f.null_counts["closed"] in (0, f.num_records) for f in files)
    assert all(f.num_records <= 50 for f in files)
    for kind in (0, 1):  # no nulls, all nulls: the key ranges of one kind's files are apart
        ranges = sorted((f.min_values["k"], f.max_values["k"]) for f in files
                        if (f.null_counts["closed"] == f.num_records) == kind)
        assert len(ranges) >= 2
        assert all(hi < lo for (_, hi), (lo, _) in zip(ranges, ranges[1:]))
    assert lake.read(lake.snapshot("t")).count() == 400


def test_the_nulls_of_a_partition_column_cannot_be_kept_apart():
    with pytest.raises(ConfigError, match="not a partition column"):
        Output("t", SCHEMA, partition_by=("p",), nulls_apart="p")
