"""The Lake resource: Delta tables under one root, for assets, sensors and jobs."""

from __future__ import annotations

import os
from typing import Literal, Optional

import dagster as dg
from pydantic import Field

from lakelog.lake import EmbeddedLake, Lake
from lakelog.resources.spark import SparkResource

DEFAULT_ROOT = "./.lakelog"
ROOT_VARIABLE = "LAKELOG_HOME"


class LakeResource(dg.ConfigurableResource):
    """Opens the lake at `root`; without one, at $LAKELOG_HOME (else ./.lakelog) when used.

    The root is resolved when the lake is opened, not when definitions are loaded, so one code
    location serves every environment and a test can point it at a temporary folder.
    """

    spark: SparkResource
    root: Optional[str] = Field(
        default=None, description="Local path or object-store URI; default $LAKELOG_HOME."
    )
    engine: Literal["embedded"] = Field(
        default="embedded", description="Delta engine: embedded = delta-rs commits, no Delta jars."
    )
    storage_options: dict[str, str] = Field(
        default={}, description="Object-store options passed to delta-rs."
    )

    def resolved_root(self) -> str:
        return self.root or os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT

    def open(self) -> Lake:
        """The lake. Spark starts on first use: sensors read only metadata and never start it."""
        return EmbeddedLake(
            self.spark.session, self.resolved_root(), storage_options=self.storage_options
        )
