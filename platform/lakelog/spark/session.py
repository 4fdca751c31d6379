"""Building the SparkSession lakelog expects.

Engine functions never create sessions; the CLI, the Dagster resource and the tests build one
here so that every entry point runs with the same settings. A session is one of three kinds:
a Spark Connect session to `remote`, a classic in-process session on `master`, or (neither
given) a Spark Connect session to the local server lakelog manages (`lakelog.spark.server`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

if TYPE_CHECKING:
    from lakelog.spark.server import ServerConfig

LOG4J = Path(__file__).with_name("log4j2.properties")
#: The local Connect server's logging: warnings, and where it listens once started.
SERVER_LOG4J = Path(__file__).with_name("server-log4j2.properties")

#: Settings the engine relies on: UTC session time (event times are instants), Parquet timestamps
#: that every Delta reader understands, and small shuffles suited to microbatches.
REQUIRED_CONF: Mapping[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "4096",
}

#: Defaults for a local session; any of them can be overridden.
LOCAL_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "4g",
    "spark.sql.adaptive.enabled": "true",
    # Each ingest generates ~120 classes; with Spark's default cache of 100 every round would
    # evict and recompile (and re-JIT) all of them. Static: takes effect at session start.
    "spark.sql.codegen.cache.maxEntries": "2000",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
    "spark.hadoop.parquet.summary.metadata.level": "NONE",
    # PySpark 4 otherwise records the Python call site of every Column function for error
    # messages: several JVM round trips per call, a quarter of a windowed microbatch's driver
    # time. Spark's own error (with the plan) is still raised; only the Python line is left out.
    "spark.python.sql.dataFrameDebugging.enabled": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J.as_uri()}",
}


def session_conf(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The full configuration: local defaults, then overrides, then the settings lakelog needs."""
    conf = dict(LOCAL_DEFAULTS)
    conf.update(overrides or {})
    conf.update(REQUIRED_CONF)
    return conf


def create_session(
    *,
    master: str = "local[*]",
    remote: str | None = None,
    app_name: str = "lakelog",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Start (or reuse) a SparkSession: classic with `master`, or Spark Connect with `remote`.

    `remote` is a Spark Connect URL such as ``sc://spark-connect:15002``.
    """
    builder = SparkSession.builder.appName(app_name)
    builder = builder.remote(remote) if remote else builder.master(master)
    # A Connect server owns its cluster settings; the client sends only what lakelog requires.
    settings = {**(conf or {}), **REQUIRED_CONF} if remote else session_conf(conf)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def open_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    server: ServerConfig | None = None,
    app_name: str = "lakelog",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session on `remote`, else classic on `master`, else on the local server (`server`).

    The local server is started first if none answers at its port (`ensure_running`).
    """
    if remote or master:
        return create_session(master=master or "local[*]", remote=remote, app_name=app_name,
                              conf=conf)
    from lakelog.spark.server import ServerConfig, ensure_running

    config = server or ServerConfig()
    ensure_running(config)
    return create_session(remote=config.url, app_name=app_name, conf=conf)


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect session (no SparkContext, plans analysed remotely)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
