"""The Spark resource: a session built by `lakelog.spark.session`, so it always has the engine's
settings.

Not `dagster_pyspark.PySparkResource`: that one builds its session eagerly in each run worker
(a JVM per run) and knows neither Spark Connect nor `lakelog.spark.session.REQUIRED_CONF`. Here
the session is created on first use, so loading definitions or evaluating a sensor that never
touches Spark starts nothing, and by default it is a Spark Connect session to the one local
server lakelog manages (`lakelog spark`), started by whichever process needs it first.
"""

from __future__ import annotations

import os
from typing import Optional

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from lakelog.spark.server import ServerConfig
from lakelog.spark.session import open_session


class SparkResource(dg.ConfigurableResource):
    """Spark Connect at `remote`, else a classic session on `master`, else the local server.

    Unset, `remote` and `master` fall back to $LAKELOG_SPARK_REMOTE and $LAKELOG_SPARK_MASTER
    when the session opens; the local server's settings come from $LAKELOG_SPARK_SERVER_*.
    """

    master: Optional[str] = Field(
        default=None,
        description="Spark master of a classic session of the run's own (local[*], spark://…); "
        "default $LAKELOG_SPARK_MASTER.",
    )
    remote: Optional[str] = Field(
        default=None,
        description="Spark Connect URL (sc://host:15002); takes precedence over `master`; "
        "default $LAKELOG_SPARK_REMOTE.",
    )
    server_port: Optional[int] = Field(
        default=None,
        description="Port of the local Spark Connect server used when neither `remote` nor "
        "`master` is set; default $LAKELOG_SPARK_SERVER_PORT, else 15002.",
    )
    app_name: str = "lakelog"
    conf: dict[str, str] = Field(
        default={}, description="Extra Spark settings; lakelog's required settings always win."
    )

    def session(self) -> SparkSession:
        remote = self.remote or os.environ.get("LAKELOG_SPARK_REMOTE") or None
        master = None if remote else self.master or os.environ.get("LAKELOG_SPARK_MASTER") or None
        return open_session(
            master=master,
            remote=remote,
            server=ServerConfig.from_environment(os.environ, port=self.server_port),
            app_name=self.app_name,
            conf=self.conf,
        )
