"""lakelog: stream processing on a Delta Lake lakehouse, computed by PySpark.

This package is the engine: plain Python and PySpark, no Dagster. The Dagster layer lives in
`lakelog.assets`, `lakelog.resources` and `lakelog.sensors`.
"""

__version__ = "0.1.0"
