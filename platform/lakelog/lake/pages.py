"""Small Parquet pages with a page index, for a table that asks for them by its property
`PAGE_ROWS` (topic tables get it when `lakelog.log.offsets.ensure_topic_table` creates them; a
topic table created before keeps the writers' defaults until the property is set on it, e.g.
``lake.set_properties("log/<topic>", {PAGE_ROWS: "2000"})``, which later writes follow).

A microbatch cut by `max_records_per_batch` reads a range of offsets out of larger log files.
Spark pushes the offset bounds down and, from a file's page index, decodes only the pages that
hold them. pyarrow, which writes a held ingest's files and the small writes
(`lakelog.lake.driver_write`), writes no page index unless asked, so Spark decodes the whole
file for any range; parquet-mr's pages hold up to 20,000 rows. With 2,000-row pages and an
index, a 250-row read of a 60,000-row file took 0.036 s against 0.070 s as pyarrow writes it by
default, and reading the whole file was no slower (`benchmarks/bench_log_pages.py`).

pyarrow, which reads a microbatch's records in the step's process (`lakelog.log.held_records`),
skips whole row groups by their statistics but not pages, and both writers put a file in one row
group unless told (pyarrow up to 1Mi rows, parquet-mr up to 128 MB): so the same tables' files
hold `ROW_GROUP_PAGES` pages a row group. (parquet-mr's row limit for a row group came with
parquet-java 1.16, in pyspark 4.1 and newer; with pyspark 4.0's 1.15, Spark's files keep row
groups of up to 128 MB.) A 1,000-record range read by pyarrow out of four 50,000-row files took
14 ms in row groups of 10,000 rows against 47 ms in one, the whole files 15 ms either way; the
demo's log files grew by 0-8 % (page views the most: the dictionaries of a row group's columns
are its own).

Tables other than the log keep the writers' defaults: with this layout in every file, the
stream-table joins were slower (benchmarks/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The table property: the most rows in one data page of a column, and a page index.
PAGE_ROWS = "lakelog.parquet.pageRows"
#: The log's topic tables' value.
LOG_PAGE_ROWS = 2000
#: The most pages in one row group of such a table's files.
ROW_GROUP_PAGES = 5


def page_rows(properties: Mapping[str, str]) -> int | None:
    """The table's page size in rows; None: the writers' defaults."""
    value = properties.get(PAGE_ROWS)
    return int(value) if value else None


def row_group_rows(rows: int) -> int:
    """The most rows in a row group of a table of `rows`-row pages."""
    return rows * ROW_GROUP_PAGES


def spark_options(rows: int | None) -> dict[str, str]:
    """Spark's writer options (parquet-mr writes a page index whatever the page size)."""
    return {} if rows is None else {"parquet.page.row.count.limit": str(rows),
                                    "parquet.block.row.count.limit": str(row_group_rows(rows))}


def arrow_options(rows: int | None) -> dict[str, Any]:
    """`pyarrow.parquet.write_table`'s keyword arguments (pyarrow 23 and newer)."""
    return {} if rows is None else {"write_page_index": True, "max_rows_per_page": rows,
                                    "row_group_size": row_group_rows(rows)}
