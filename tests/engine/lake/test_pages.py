"""The page layout a table asks for by its property (`lakelog.lake.pages`), read back from the
files' footers by parquet-mr, the reader Spark uses: whichever writer (Spark or pyarrow) wrote a
file of a log's topic table, every column chunk has a page index and no page holds more than
`LOG_PAGE_ROWS` rows; other tables keep the writers' defaults."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.lake import pages
from lakelog.log.offsets import ensure_topic_table
from lakelog.log.topics import Topic

ROWS = 3 * pages.LOG_PAGE_ROWS + 500
WRITERS = pytest.mark.parametrize("rows_hint", [None, ROWS], ids=["spark", "pyarrow"])


@pytest.fixture(autouse=True)
def classic_only(request):
    if request.config.getoption("--spark-connect"):
        pytest.skip("reads the footers through the JVM of a classic session")


def page_rows(spark, path: str) -> list[list[int] | None]:
    """Per column chunk of the file, the rows of each page by its offset index (None: none)."""
    jvm = spark._jvm
    source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
        jvm.org.apache.hadoop.fs.Path(path), spark._jsc.hadoopConfiguration())
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
    try:
        chunks = []
        for block in reader.getFooter().getBlocks():
            for column in block.getColumns():
                index = reader.readOffsetIndex(column)
                if index is None:
                    chunks.append(None)
                    continue
                firsts = [index.getFirstRowIndex(i) for i in range(index.getPageCount())]
                chunks.append([b - a for a, b in zip(firsts, [*firsts[1:], block.getRowCount()])])
        return chunks
    finally:
        reader.close()


def written(lake, spark, path: str, df, rows_hint) -> list[list[list[int] | None]]:
    lake.write(lake.snapshot(path), df.coalesce(1), rows_hint=rows_hint)
    files = lake.snapshot(path).files()
    assert sum(f.num_records for f in files) == ROWS
    return [page_rows(spark, f"{lake.uri(path)}/{f.path}") for f in files]


@WRITERS
def test_a_topic_table_has_small_pages_and_a_page_index(lake, spark, rows_hint):
    topic = Topic("clicks", T.StructType([T.StructField("event_id", T.StringType()),
                                          T.StructField("user_id", T.StringType())]),
                  key="user_id", partitions=1)
    ensure_topic_table(lake, topic)
    schema = lake.snapshot(topic.path).schema
    df = spark.range(ROWS).select(
        *[F.col("id").alias(f.name) if f.name == "offset" else F.lit(0).alias(f.name)
          if f.name == "partition" else F.lit(None).cast(f.dataType).alias(f.name)
          for f in schema])
    for chunks in written(lake, spark, topic.path, df, rows_hint):
        assert chunks and None not in chunks
        for rows in chunks:
            assert sum(rows) == ROWS and max(rows) <= pages.LOG_PAGE_ROWS, rows


@WRITERS
def test_other_tables_keep_the_writers_defaults(lake, spark, rows_hint):
    lake.create_table("t", T.StructType([T.StructField("id", T.LongType())]))
    for chunks in written(lake, spark, "t", spark.range(ROWS), rows_hint):
        # parquet-mr always writes an offset index; pyarrow only when asked
        assert chunks == ([[ROWS]] if rows_hint is None else [None])
