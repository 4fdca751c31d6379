"""A class-data-sharing archive of the Spark server's classes: every server but the first starts
sooner and runs its first queries sooner.

A new server JVM loads, parses and verifies some 20,000 classes of Spark and its libraries, at
start-up and at its first queries. The JDK can keep the classes a JVM loaded in an archive
(application class-data sharing, JDK 13+), which later JVMs map instead of loading the classes
again. A server started without an archive records one as it exits (`ArchiveClassesAtExit`) to a
pending file of its port; `lakelog spark stop` keeps it once the server has ended of itself, and
later servers map it (`SharedArchiveFile`). A server killed, or one that died, keeps none: its
pending file may be partial, and the next server of the port writes it again.

Archives are shared by every server of the machine's user (one folder, ``ARCHIVE_DIR``), one per
pyspark version and Java runtime; the JVM checks an archive it maps against its own classpath
and version, and runs without it, as before, if they differ. The JVM's messages about classes it
cannot archive are left out of the server log.

Measured on 2 cores (docs/spark.md): a server answered after 4.5-5.1 s instead of 6.5-6.6 s;
`lakelog demo` (100,000 events) on a stopped server took 102.5-105.1 s against 105.0-108.1 s
without sharing. The server that writes the archive pays for it in its first minute: the same
demo took 112.6-115.5 s on it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pyspark

#: Where archives are kept unless ``LAKELOG_SPARK_SERVER_CLASS_ARCHIVES`` names another folder
#: (or ``off``: no archive).
ARCHIVE_DIR = Path.home() / ".lakelog" / "class-archives"
#: Java options of the user's own that decide class-data sharing themselves.
USER_CHOICES = ("-Xshare", "SharedArchiveFile", "ArchiveClassesAtExit")
#: The JVM's messages about classes it does not archive (signed jars, old class files), which
#: would fill the server log at every exit and start.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")


def _java() -> Path | None:
    """The java that spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive(directory: Path) -> Path | None:
    """The archive of this pyspark and Java runtime in `directory` (None without a java)."""
    java = _java()
    if java is None:
        return None
    stat = java.stat()
    runtime = hashlib.sha256(f"{java}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    return directory / f"spark-{pyspark.__version__}-{runtime[:12]}.jsa"


def pending(final: Path, port: int) -> Path:
    """Where a server of `port` without an archive writes one as it exits."""
    return final.with_name(f"{final.name}.{port}.pending")


def java_options(directory: Path | None, port: int, user_options: str) -> list[str]:
    """The server's class-data sharing flags: map the archive, or write it at exit."""
    if directory is None or any(choice in user_options for choice in USER_CHOICES):
        return []
    final = archive(directory)
    if final is None:
        return []
    if final.exists():
        return [f"-XX:SharedArchiveFile={final}", *QUIET]
    directory.mkdir(parents=True, exist_ok=True)
    return [f"-XX:ArchiveClassesAtExit={pending(final, port)}", *QUIET]


def keep(options: list[str], *, ended_of_itself: bool) -> Path | None:
    """After a server started with `options` ended: its archive, if it wrote one and ended of
    itself (a server killed may have left a partial file, which is removed)."""
    written = next((Path(o.split("=", 1)[1]) for o in options
                    if o.startswith("-XX:ArchiveClassesAtExit=")), None)
    if written is None or not written.exists():
        return None
    if not ended_of_itself or written.stat().st_size == 0:
        written.unlink(missing_ok=True)
        return None
    final = written.with_name(written.name.rsplit(".", 2)[0])
    os.replace(written, final)  # atomic: a server starting now maps all of it or none
    return final
