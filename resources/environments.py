"""The one place where environments differ: which resource instances are built."""

from __future__ import annotations

from typing import Literal

import dagster as dg

from lakelog.resources.lake import LakeResource
from lakelog.resources.source import SourceResource
from lakelog.resources.spark import SparkResource

Environment = Literal["local", "spark_connect"]


def build_resources(environment: Environment = "local") -> dict[str, dg.ConfigurableResource]:
    """Resources by key. `spark_connect` reads its URLs from the environment at run time.

    local: the local Spark Connect server (started on first use); the lake at $LAKELOG_HOME
    or ./.lakelog.
    spark_connect: a Spark Connect session at $LAKELOG_SPARK_REMOTE and the lake at
    $LAKELOG_HOME, which must be storage the client and the cluster both reach.
    Both: CDC sources are PostgreSQL at $LAKELOG_SOURCE_DSN when set, else SQLite in the lake.
    """
    if environment == "spark_connect":
        spark = SparkResource(remote=dg.EnvVar("LAKELOG_SPARK_REMOTE"))
        lake = LakeResource(spark=spark, root=dg.EnvVar("LAKELOG_HOME"))
    else:
        spark = SparkResource()
        lake = LakeResource(spark=spark)
    return {"spark": spark, "lake": lake, "source": SourceResource()}
