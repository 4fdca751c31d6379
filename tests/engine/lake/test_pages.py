"""The page layout a table asks for by its property (`lakelog.lake.pages`), read back from the
files' footers by parquet-mr, the reader Spark uses: whichever writer (Spark or pyarrow) wrote a
file of a log's topic table, every column chunk has a page index, no page holds more than
`LOG_PAGE_ROWS` rows and no row group more than `ROW_GROUP_PAGES` pages' worth; other tables
keep the writers' defaults. And the reason for it, an offset range read that skips pages by the
index (Spark) or row groups by their statistics (pyarrow), gives exactly the range's records."""

from __future__ import annotations

import pyspark
import pytest
from pyspark.sql import functions as F
from pyspark.sql import types as T

from lakelog.lake import pages
from lakelog.log.offsets import ensure_topic_table, read_offsets
from lakelog.log.topics import Topic

GROUP = pages.row_group_rows(pages.LOG_PAGE_ROWS)
ROWS = 2 * GROUP + 3 * pages.LOG_PAGE_ROWS + 500  # three row groups, the last partly full
#: Whether Spark's parquet-java limits a row group's rows (1.16, in pyspark 4.1 and newer).
ROW_GROUP_ROW_LIMIT = tuple(map(int, pyspark.__version__.split(".")[:2])) >= (4, 1)
WRITERS = pytest.mark.parametrize("rows_hint", [None, ROWS], ids=["spark", "pyarrow"])


@pytest.fixture
def classic_only(request):
    if request.config.getoption("--spark-connect"):
        pytest.skip("reads the footers through the JVM of a classic session")


def page_rows(spark, path: str) -> list[tuple[int, list[int] | None]]:
    """Per column chunk of the file, its row group's rows and the rows of each page by its offset
    index (None: none)."""
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
                    chunks.append((block.getRowCount(), None))
                    continue
                firsts = [index.getFirstRowIndex(i) for i in range(index.getPageCount())]
                chunks.append((block.getRowCount(), [
                    b - a for a, b in zip(firsts, [*firsts[1:], block.getRowCount()])]))
        return chunks
    finally:
        reader.close()


def footers(lake, spark, path: str) -> list[list[tuple[int, list[int] | None]]]:
    """`page_rows` of each file of the table at `path`, which holds ROWS rows."""
    files = lake.snapshot(path).files()
    assert sum(f.num_records for f in files) == ROWS
    return [page_rows(spark, f"{lake.uri(path)}/{f.path}") for f in files]


def topic_log(lake, spark, rows_hint) -> str:
    """A one-partition topic table holding offsets 0 to ROWS - 1, event ids ``e<offset>``."""
    topic = Topic("clicks", T.StructType([T.StructField("event_id", T.StringType()),
                                          T.StructField("user_id", T.StringType())]),
                  key="user_id", partitions=1)
    ensure_topic_table(lake, topic)
    schema = lake.snapshot(topic.path).schema
    columns = {"offset": F.col("id"), "partition": F.lit(0),
               "event_id": F.concat(F.lit("e"), F.col("id").cast("string"))}
    df = spark.range(ROWS).select(*[columns.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name)
                                    for f in schema])
    lake.write(lake.snapshot(topic.path), df.coalesce(1), rows_hint=rows_hint)
    return topic.path


@WRITERS
def test_a_topic_table_has_small_pages_and_a_page_index(lake, spark, rows_hint, classic_only):
    path = topic_log(lake, spark, rows_hint)
    for chunks in footers(lake, spark, path):
        assert chunks and all(rows is not None for _, rows in chunks)
        for group, rows in chunks:
            assert sum(rows) == group and max(rows) <= pages.LOG_PAGE_ROWS, rows
        if rows_hint is None and not ROW_GROUP_ROW_LIMIT:  # parquet-java 1.15: one row group
            assert {group for group, _ in chunks} == {ROWS}
            continue
        columns = len(chunks) // 3  # the file's three row groups: two full, one not
        assert sorted(group for group, _ in chunks) == sorted(
            [GROUP] * 2 * columns + [ROWS - 2 * GROUP] * columns)


@WRITERS
def test_a_range_read_across_pages_gives_exactly_its_records(lake, spark, rows_hint):
    snapshot = lake.snapshot(topic_log(lake, spark, rows_hint))
    edge = pages.LOG_PAGE_ROWS
    for lo, hi in [(edge - 10, edge + 10), (edge + 100, 2 * edge + 350), (0, 1),
                   (GROUP - 5, GROUP + 5), (GROUP + 1, 2 * GROUP + 1), (ROWS - 3, ROWS),
                   (0, ROWS)]:
        got = read_offsets(lake, snapshot, {0: (lo, hi)}).select("offset", "event_id").collect()
        assert sorted((r.offset, r.event_id) for r in got) == [
            (o, f"e{o}") for o in range(lo, hi)], (lo, hi)


@WRITERS
def test_other_tables_keep_the_writers_defaults(lake, spark, rows_hint, classic_only):
    lake.create_table("t", T.StructType([T.StructField("id", T.LongType())]))
    lake.write(lake.snapshot("t"), spark.range(ROWS).coalesce(1), rows_hint=rows_hint)
    for chunks in footers(lake, spark, "t"):
        # One row group. parquet-mr always writes an offset index (its pages up to 20,000
        # rows); pyarrow only when asked.
        [(group, rows)] = chunks
        assert group == ROWS
        assert (rows is None) == (rows_hint is not None) and (rows is None or sum(rows) == ROWS)
