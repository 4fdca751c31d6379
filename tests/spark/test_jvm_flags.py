"""The flags of the JVMs lakelog starts (`lakelog.spark.session.JAVA_OPTIONS`): the parallel
collector and shallow inlining, in a classic session's driver and the local server alike, and
replaced whole by a user's own."""

from __future__ import annotations

from pathlib import Path

from processes import TEST_SERVER

from lakelog.spark.server import DEFAULT_JAVA_OPTIONS, status
from lakelog.spark.session import JAVA_OPTIONS, over_connect, session_conf

FLAGS = JAVA_OPTIONS.split()


def test_the_flags_are_the_collector_and_the_inlining():
    assert FLAGS[0] == "-XX:+UseParallelGC"
    assert "-XX:MaxInlineLevel=6" in FLAGS and "-XX:C1MaxInlineLevel=6" in FLAGS
    assert DEFAULT_JAVA_OPTIONS == JAVA_OPTIONS


def test_a_classic_sessions_conf_carries_them_and_a_users_own_replace_them():
    options = session_conf()["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=") and options[1:] == FLAGS
    mine = session_conf({"spark.driver.extraJavaOptions": "-Xss4m"})
    assert mine["spark.driver.extraJavaOptions"] == "-Xss4m"


def test_the_running_jvm_has_them(spark):
    """The test session's own JVM: a classic session's driver, or over Spark Connect the
    server's (read from its command line)."""
    if over_connect(spark):
        pid = status(TEST_SERVER).pid
        assert pid is not None
        arguments = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        options = next(a for a in arguments if a.startswith("spark.driver.extraJavaOptions="))
        running = options.split("=", 1)[1].split()
    else:
        bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        running = list(bean.getInputArguments())
    assert set(FLAGS) <= set(running), sorted(set(FLAGS) - set(running))
