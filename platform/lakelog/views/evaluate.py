"""A model's SQL as a Spark DataFrame, its refs bound to DataFrames.

Refs are passed to ``spark.sql`` as DataFrame arguments, which pyspark binds to uniquely named
temporary views for that one query: two models, or two evaluations of one model over different
inputs, never see each other's tables.
A ref to a view model inlines that model's query: views are recomputed on every read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from lakelog.errors import LakelogError
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
        return spark.sql(model.template, **frames) if frames else spark.sql(model.body)
