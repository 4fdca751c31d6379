"""The flags of the JVMs lakelog starts: shallow inlining (`session.SHALLOW_INLINING`) in a
classic session's driver and the local server alike, the server with the parallel collector
too; a user's own flags replace them whole."""

from __future__ import annotations

from processes import TEST_SERVER, server_java_options

from lakelog.spark.server import DEFAULT_JAVA_OPTIONS, status
from lakelog.spark.session import SHALLOW_INLINING, over_connect, session_conf

INLINING = SHALLOW_INLINING.split()


def test_the_servers_flags_are_the_collector_and_the_inlining():
    assert DEFAULT_JAVA_OPTIONS.split() == ["-XX:+UseParallelGC", *INLINING]
    assert "-XX:MaxInlineLevel=6" in INLINING and "-XX:C1MaxInlineLevel=6" in INLINING


def test_a_classic_sessions_conf_carries_the_inlining_and_a_users_own_replace_it():
    options = session_conf()["spark.driver.extraJavaOptions"].split()
    assert options[0].startswith("-Dlog4j2.configurationFile=") and options[1:] == INLINING
    mine = session_conf({"spark.driver.extraJavaOptions": "-Xss4m"})
    assert mine["spark.driver.extraJavaOptions"] == "-Xss4m"


def test_the_running_jvm_has_them(spark):
    """The test session's own JVM: a classic session's driver, or over Spark Connect the
    server's (read from its command line)."""
    if over_connect(spark):
        pid = status(TEST_SERVER).pid
        assert pid is not None
        options = server_java_options(pid)
        running, expected = options.split("=", 1)[1].split(), DEFAULT_JAVA_OPTIONS.split()
    else:
        bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
        running, expected = list(bean.getInputArguments()), INLINING
    assert set(expected) <= set(running), sorted(set(expected) - set(running))
