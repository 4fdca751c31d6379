"""The Spark resource: a session built by `lakelog.session`, so it always has the engine's settings.

Not `dagster_pyspark.PySparkResource`: that one builds its session eagerly and knows neither Spark
Connect nor `lakelog.session.REQUIRED_CONF`. Here the session is created on first use, so loading
definitions or evaluating a sensor that never touches Spark starts no JVM, and getOrCreate reuses
a session already running in the process.
"""

from __future__ import annotations

from typing import Optional

import dagster as dg
from pydantic import Field
from pyspark.sql import SparkSession

from lakelog.session import create_session


class SparkResource(dg.ConfigurableResource):
    """A classic session on `master`, or a Spark Connect session when `remote` is set."""

    master: str = Field(default="local[*]", description="Spark master of a classic session.")
    remote: Optional[str] = Field(
        default=None,
        description="Spark Connect URL (sc://host:15002); takes precedence over `master`.",
    )
    app_name: str = "lakelog"
    conf: dict[str, str] = Field(
        default={}, description="Extra Spark settings; lakelog's required settings always win."
    )

    def session(self) -> SparkSession:
        return create_session(
            master=self.master, remote=self.remote, app_name=self.app_name, conf=self.conf
        )
