"""Code location for a Spark Connect cluster: the same definitions, other resource instances.

    LAKELOG_SPARK_REMOTE=sc://spark-connect:15002 LAKELOG_HOME=s3://bucket/lake \
        dagster dev -f deploy/spark_connect.py
"""

from lakelog.assets.location import build_definitions
from lakelog.demo.pipeline import pipeline
from lakelog.resources import build_resources

defs = build_definitions(pipeline, resources=build_resources("spark_connect"))
