"""The local Spark Connect server: started once however many processes ask, bound to loopback,
replaced when it died, stopped on request; bad settings are clear errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import TEST_ARCHIVES, free_port, server_java_options, subprocess_env

from lakelog.errors import ConfigError
from lakelog.spark import class_archive
from lakelog.spark.server import (
    DEFAULT_JAVA_OPTIONS,
    ServerConfig,
    ServerError,
    ensure_running,
    listening_sockets,
    status,
    stop,
)

LAKELOG = [sys.executable, "-m", "lakelog.cli"]


@pytest.fixture
def server_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_SPARK")}
    return {**env, "LAKELOG_SPARK_SERVER_PORT": str(free_port()),
            "LAKELOG_SPARK_SERVER_DIR": str(tmp_path / "spark"),
            "LAKELOG_SPARK_SERVER_CORES": "1", "LAKELOG_SPARK_SERVER_MEMORY": "1g",
            "LAKELOG_SPARK_SERVER_CLASS_ARCHIVES": str(TEST_ARCHIVES)}


def spark_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([*LAKELOG, "spark", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.slow
def test_one_server_for_concurrent_starters_on_loopback_replaced_after_kill(server_env):
    config = ServerConfig.from_environment(server_env)
    assert spark_cli("status", env=server_env).returncode == 3  # none yet

    starters = [subprocess.Popen([*LAKELOG, "spark", "start", "--json"], env=server_env,
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
    started = [json.loads(p.communicate(timeout=300)[0]) for p in starters]
    assert all(p.returncode == 0 for p in starters)
    pids = {s["pid"] for s in started}
    assert len(pids) == 1 and all(s["healthy"] for s in started)  # three asked, one started
    [pid] = pids
    servers = subprocess.run(["pgrep", "-f", f"binding.port={config.port}"],
                             capture_output=True, text=True).stdout.split()
    assert servers == [str(pid)]
    sockets = listening_sockets(pid)  # gRPC and the driver's own ports
    assert (("127.0.0.1", config.port) in sockets and len(sockets) >= 3
            and {address for address, _ in sockets} == {"127.0.0.1"})

    try:
        # A query through it, from a process of its own (this one may hold a classic session).
        query = ("import os; from lakelog.spark.server import ServerConfig; "
                 "from lakelog.spark.session import open_session; "
                 "spark = open_session(server=ServerConfig.from_environment(os.environ)); "
                 "print(spark.range(5).selectExpr('sum(id) AS s').first().s, spark.version)")
        total, version = subprocess.run([sys.executable, "-c", query], env=server_env,
                                        capture_output=True, text=True, timeout=300,
                                        check=True).stdout.split()
        assert total == "10"
        done = spark_cli("status", "--json", env=server_env)
        assert done.returncode == 0 and json.loads(done.stdout)["spark_version"] == version

        os.kill(pid, signal.SIGKILL)  # the server dies; the next user starts a new one
        for _ in range(100):
            if not status(config).alive:
                break
            time.sleep(0.1)
        assert spark_cli("status", env=server_env).returncode == 3
        replaced = ensure_running(config)
        assert replaced.healthy and replaced.pid != pid
    finally:
        stopped = stop(config)
    assert stopped is not None and not status(config).alive
    assert "no Spark server" in spark_cli("stop", env=server_env).stdout


#: In a process of its own (the test process may hold a classic session): a step's session on a
#: server that dies, while another step's `open_session` starts a new server and closes it.
SIBLING = """
import os, signal, time
from lakelog.spark.server import ServerConfig, status
from lakelog.spark.session import open_session, server_lost
config = ServerConfig.from_environment(os.environ)
held = open_session(server=config)
assert held.range(3).count() == 3
os.kill(status(config).pid, signal.SIGKILL)
while status(config).alive:
    time.sleep(0.1)
try:
    held.range(6).columns  # asks the dead server for the plan's schema
except Exception as exc:
    print(type(exc).__name__, server_lost(exc))
fresh = open_session(server=config)
assert fresh is not held and fresh.range(4).count() == 4
try:
    held.range(5).count()
except Exception as exc:
    print(type(exc).__name__, server_lost(exc))
"""


@pytest.mark.slow
def test_a_session_closed_for_a_replaced_server_is_a_lost_server(server_env):
    """So is the error of a session whose server is dead, before one replaces it (pyspark 4.0
    keeps only the gRPC error's text). The step still holding such a session asks for a retry
    (`assets.errors.engine_errors`) rather than failing: its retry opens a session on the new
    server."""
    config = ServerConfig.from_environment(server_env)
    try:
        said = subprocess.run([sys.executable, "-c", SIBLING], env=server_env,
                              capture_output=True, text=True, timeout=300)
        assert said.returncode == 0, said.stderr[-2000:]
        words = said.stdout.split()  # the dead server's error, then the closed session's
        assert len(words) == 4 and words[1] == words[3] == "True", said.stdout
    finally:
        stop(config)


@pytest.mark.slow
def test_a_server_that_cannot_bind_is_a_clear_error_with_its_log(server_env, tmp_path):
    """With no class archive yet, the one the server wrote as it exited (of the few classes it
    loaded) is removed, not left for the next server of the port."""
    server_env["LAKELOG_SPARK_SERVER_CLASS_ARCHIVES"] = str(tmp_path / "archives")
    config = ServerConfig.from_environment(server_env)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", config.port))
        taken.listen()
        with pytest.raises(ServerError, match="exited while starting") as caught:
            ensure_running(config, timeout=120)
    assert config.file("log").name in str(caught.value)
    assert not status(config).alive
    assert list((tmp_path / "archives").iterdir()) == []  # no archive, kept or pending


#: In a process of its own, on the test server: opening the session again, and a lake on it,
#: send no settings (each would be a round trip, every step) and do not look again at which
#: sockets the live server listens on; other settings are sent.
REOPEN = """
import os
from pyspark.sql.connect.client import core
from lakelog.lake import EmbeddedLake
from lakelog.spark import server
from lakelog.spark.server import ServerConfig
from lakelog.spark.session import open_session
config = ServerConfig.from_environment(os.environ)
spark = open_session(server=config)
sent, looked = [], []
real = core.SparkConnectClient.config
core.SparkConnectClient.config = lambda self, operation: sent.append(operation) or real(
    self, operation)
real_sockets = server.listening_sockets
server.listening_sockets = lambda pid: looked.append(pid) or real_sockets(pid)
again = open_session(server=config)
EmbeddedLake(again, "/nowhere").spark
print(again is spark, len(sent), len(looked))
other = open_session(server=config, conf={"spark.lakelog.test.reopened": "yes"})
print(other is spark, len(sent) > 0, spark.conf.get("spark.lakelog.test.reopened"))
"""


@pytest.mark.slow
def test_a_session_opened_again_with_its_settings_sends_none_of_them():
    shown = subprocess.run([sys.executable, "-c", REOPEN], env=subprocess_env(),
                           capture_output=True, text=True, timeout=300, check=True).stdout
    assert shown.split("\n")[:2] == ["True 0 0", "True True yes"]


#: In a process of its own, on the test server: the session `lakelog demo` opens while it
#: prepares is the one its runs' Spark resource then uses, opened once and not set up again.
MEANWHILE = """
import sys
from pyspark.sql.connect.client import core
from lakelog.cli.common import lake, open_spark_meanwhile
from lakelog.cli.main import build_parser
from lakelog.cli.runs import spark_resource
args = build_parser().parse_args(["demo", "--home", sys.argv[1]])
opening = open_spark_meanwhile(args)
opening.join()
sent = []
real = core.SparkConnectClient.config
core.SparkConnectClient.config = lambda self, operation: sent.append(operation) or real(
    self, operation)
spark = spark_resource(args).session()
print(opening.name, spark is lake(args).spark, len(sent), spark.range(3).count())
"""


@pytest.mark.slow
def test_the_demo_opens_spark_meanwhile_for_its_runs(tmp_path):
    shown = subprocess.run([sys.executable, "-c", MEANWHILE, str(tmp_path / "home")],
                           env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert shown.stdout.split()[-4:] == ["lakelog-open-spark", "True", "0", "3"]


def test_settings_come_from_arguments_then_the_environment(tmp_path):
    env = {"LAKELOG_SPARK_SERVER_PORT": "16000", "LAKELOG_SPARK_SERVER_CORES": "3",
           "LAKELOG_SPARK_SERVER_DIR": str(tmp_path)}
    config = ServerConfig.from_environment(env)
    assert (config.port, config.master, config.memory) == (16000, "local[3]", "4g")
    assert config.url == "sc://127.0.0.1:16000" and config.state_dir == tmp_path
    assert ServerConfig.from_environment(env, port=16001, memory="8g").port == 16001
    assert ServerConfig.from_environment(env, master="spark://127.0.0.1:7077").master == (
        "spark://127.0.0.1:7077")
    command = " ".join(config.command())
    for setting in ("spark.connect.grpc.binding.address=127.0.0.1",
                    "spark.connect.grpc.binding.port=16000",
                    "spark.driver.bindAddress=127.0.0.1", "spark.driver.host=127.0.0.1",
                    "spark.sql.session.timeZone=UTC"):
        assert setting in command
    java = next(a for a in config.command() if a.startswith("spark.driver.extraJavaOptions="))
    assert java.endswith(f" {DEFAULT_JAVA_OPTIONS}") and "-Dlog4j2.configurationFile=" in java
    assert "-XX:+UseParallelGC" in java and "-XX:MaxInlineLevel=6" in java
    env["LAKELOG_SPARK_SERVER_JAVA_OPTIONS"] = "-XX:+UseG1GC -Xss4m"
    java = next(a for a in ServerConfig.from_environment(env).command()
                if a.startswith("spark.driver.extraJavaOptions="))
    assert java.endswith(" -XX:+UseG1GC -Xss4m") and "UseParallelGC" not in java
    assert "MaxInlineLevel" not in java  # the user's flags replace lakelog's, inlining too


@pytest.mark.parametrize("env, message", [
    ({"LAKELOG_SPARK_SERVER_PORT": "fifteen"}, "whole numbers"),
    ({"LAKELOG_SPARK_SERVER_PORT": "70000"}, "not a TCP port"),
    ({"LAKELOG_SPARK_SERVER_CORES": "0"}, "at least 1"),
])
def test_bad_settings_are_config_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        ServerConfig.from_environment(env)


def test_a_pid_file_naming_another_process_is_no_server(tmp_path):
    config = ServerConfig(port=free_port(), state_dir=tmp_path)
    tmp_path.mkdir(exist_ok=True)
    config.file("pid").write_text(f"{os.getpid()}\n")  # alive, but not a Spark Connect server
    found = status(config)
    assert not found.alive and not found.answering and found.pid is None
    assert stop(config) is None  # and nothing was signalled


@pytest.mark.slow
def test_a_server_keeps_its_classes_for_the_next_one_to_map(server_env, tmp_path):
    (tmp_path / "kept").mkdir()  # through a symlink: the memory map shows the real path
    (tmp_path / "archives").symlink_to(tmp_path / "kept")
    server_env["LAKELOG_SPARK_SERVER_CLASS_ARCHIVES"] = str(tmp_path / "archives")
    config = ServerConfig.from_environment(server_env)
    final = class_archive.archive(tmp_path / "archives")
    try:
        first = ensure_running(config)
        assert f"-XX:ArchiveClassesAtExit={class_archive.pending(final, config.port)}" in (
            server_java_options(first.pid))
        assert not final.exists()  # written as the server exits
        stop(config)
        assert final.exists() and final.stat().st_size > 0
        assert not class_archive.pending(final, config.port).exists()

        os.utime(final, (1e9, 1e9))  # written long ago: mapping it marks it as in use
        second = ensure_running(config)
        assert f"-XX:SharedArchiveFile={final}" in server_java_options(second.pid)
        assert final.stat().st_mtime > time.time() - 600
        maps = Path(f"/proc/{second.pid}/maps").read_text()
        assert str(final.resolve()) in maps  # the JVM took it: its classes are mapped
        log = config.file("log").read_text()
        assert "[cds]" not in log  # the JVM's remarks on classes it cannot archive left out
    finally:
        stop(config)
    assert [p.name for p in (tmp_path / "archives").iterdir()] == [final.name]  # none written


def test_class_sharing_is_left_to_the_user_or_off_when_asked(tmp_path):
    assert class_archive.java_options(tmp_path, 16000, "-Xshare:off") == []
    assert class_archive.java_options(None, 16000, "-XX:+UseParallelGC") == []
    assert class_archive.java_options(tmp_path / "a b", 16000, "") == []  # Spark splits on spaces
    writes = class_archive.java_options(tmp_path, 16000, "-XX:+UseParallelGC")
    assert writes[0].startswith(f"-XX:ArchiveClassesAtExit={tmp_path}/spark-")
    assert class_archive.writes(writes)
    off = ServerConfig.from_environment({"LAKELOG_SPARK_SERVER_CLASS_ARCHIVES": "off"})
    assert off.class_archives is None


def test_an_archive_of_a_server_that_was_killed_is_not_kept(tmp_path):
    """A server killed while it wrote its archive at exit leaves a partial file: removed, and
    one left by an earlier server is removed before the next server starts."""
    written = class_archive.pending(class_archive.archive(tmp_path), 16000)
    written.write_bytes(b"left by a server that died")
    options = class_archive.java_options(tmp_path, 16000, "")
    assert not written.exists()
    written.write_bytes(b"partial")
    assert class_archive.keep(options, ended_of_itself=False) is None
    assert not written.exists() and not class_archive.archive(tmp_path).exists()
    written.write_bytes(b"whole")
    assert class_archive.keep(options, ended_of_itself=True) == class_archive.archive(tmp_path)
    assert class_archive.archive(tmp_path).read_bytes() == b"whole"


def test_archives_no_server_started_on_for_a_while_go_when_a_new_one_is_kept(tmp_path):
    """Each installation leaves an archive of its own; those unused for `UNUSED_DAYS` are
    removed when a server keeps a new one, not the recently used, nor other files."""
    old = tmp_path / "spark-4.1.1-aaaaaaaaaaaa.jsa"  # another installation's, unused
    recent = tmp_path / "spark-4.2.0-bbbbbbbbbbbb.jsa"
    other = tmp_path / "notes.txt"
    for path in (old, recent, other):
        path.write_bytes(b"x")
    days_ago = time.time() - (class_archive.UNUSED_DAYS + 1) * 86400
    os.utime(old, (days_ago, days_ago))
    os.utime(other, (days_ago, days_ago))
    stale_pending = class_archive.pending(old, 16001)
    stale_pending.write_bytes(b"a server's of another port, written as it exits")
    os.utime(stale_pending, (days_ago, days_ago))

    options = class_archive.java_options(tmp_path, 16000, "")
    written = class_archive.pending(class_archive.archive(tmp_path), 16000)
    written.write_bytes(b"whole")
    os.utime(written, (days_ago, days_ago))  # even if its server ran for weeks: kept
    final = class_archive.keep(options, ended_of_itself=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [final.name, recent.name, other.name, stale_pending.name])
    assert class_archive.prune(tmp_path, final) == []  # nothing more to remove


def test_an_archive_the_jvm_turned_down_is_removed(tmp_path):
    """The JVM maps an archive written on its own class path and JVM only; one it did not map
    is removed so that the next server writes a new one. This process maps no archive."""
    final = class_archive.archive(tmp_path)
    final.write_bytes(b"written by another installation")
    options = class_archive.java_options(tmp_path, 16000, "")
    assert options[0] == f"-XX:SharedArchiveFile={final}"
    assert class_archive.forget_if_unmapped(options, os.getpid()) and not final.exists()
    assert not class_archive.forget_if_unmapped(options, 2 ** 22 + 1)  # no such process
