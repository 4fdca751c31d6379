"""A model's SQL as a Spark DataFrame, its refs bound to DataFrames.

Refs are passed to ``spark.sql`` as DataFrame arguments, which pyspark binds to uniquely named
temporary views for that one query: two models, or two evaluations of one model over different
inputs, never see each other's tables.
A ref to a view model inlines that model's query: views are recomputed on every read.

Over Spark Connect, ``spark.sql`` sends the query as a command and waits for the server to
parse and analyse it (a round trip of about 0.1 s for a model); the model's query is built here
as the same SQL relation without that round trip, and the server analyses it with the plan
that uses it (a model's errors then surface where its rows are first used, still inside the
run's `spark_errors`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from lakelog.errors import LakelogError
from lakelog.spark.session import over_connect
from lakelog.views.errors import ModelRunError
from lakelog.views.graph import ModelGraph
from lakelog.views.models import Model, ref_path

#: The stored table at a path (``log/orders``, ``views/product_funnel_hourly``) as a DataFrame.
Reader = Callable[[str], DataFrame]


def spark_message(exc: Exception) -> str:
    """The first line of Spark's message: error class, text and position, without the query
    plan or JVM stack trace that follow it."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip().rstrip(";") if lines else type(exc).__name__


@contextmanager
def spark_errors(model: Model) -> Iterator[None]:
    """Turn Spark's and the lake's errors while running `model` into one naming its file."""
    try:
        yield
    except ModelRunError:
        raise
    except PySparkException as exc:
        raise ModelRunError(
            f"{model.file}: Spark could not run the model: {spark_message(exc)}"
        ) from exc
    except LakelogError as exc:
        raise ModelRunError(f"{model.file}: {exc}") from exc


def evaluate(spark: SparkSession, graph: ModelGraph, name: str, read: Reader) -> DataFrame:
    """The rows of model `name`, reading stored tables with `read` (analysed, not executed)."""
    model = graph.models[name]
    with spark_errors(model):
        frames = {}
        for index, ref in enumerate(model.refs):
            upstream = graph.models.get(ref)
            if upstream is not None and not upstream.stored:
                frames[f"ref_{index}"] = evaluate(spark, graph, ref, read)
            else:
                frames[f"ref_{index}"] = read(ref_path(ref))
        return _query(spark, model.template, frames) if frames else _query(spark, model.body, {})


def _query(spark: SparkSession, sql: str, frames: dict[str, DataFrame]) -> DataFrame:
    """``spark.sql(sql, **frames)``; over Spark Connect a relation, not a command."""
    if not over_connect(spark):
        return spark.sql(sql, **frames)
    from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias
    from pyspark.sql.connect.sql_formatter import SQLStringFormatter

    # What pyspark's Connect `sql` sends (pyspark 4.0-4.2): the DataFrames as named views of
    # this one query.
    formatter = SQLStringFormatter(spark)
    query = formatter.format(sql, **frames) if frames else sql
    views = [SubqueryAlias(df._plan, name) for df, name in formatter._temp_views]
    return ConnectFrame(SQL(query, None, None, views), spark)
