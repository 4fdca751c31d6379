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
pyspark installation and Java runtime. The JVM maps an archive only on the class path and JVM it
was written with, and runs without it otherwise; one it turned down is removed once the server
answers (`forget_if_unmapped`), so the next server writes a new one. The JVM's messages about
classes it cannot archive are left out of the server log.

Each installation leaves its own archive (~200 MB), and a venv made again or a pyspark upgraded
leaves the old one unused. An archive a server maps is touched then (its modification time is
the last time a server started on it); when a server keeps a new archive, the folder's archives
no server has started on for `UNUSED_DAYS` are removed (`prune`). An installation whose archive
went writes a new one at its next server's stop, as a new installation does.

Measured on 2 cores (docs/spark.md): a server answered after 4.5-5.1 s instead of 6.5-6.6 s;
`lakelog demo --events 2000 --batches 1` on a stopped server took 41.8-45.5 s instead of
47.9-50.1 s. The server that writes the archive pays for it in its first minute (the 100,000-event
demo took 112.6-115.5 s on it, against 105.0-108.1 s without sharing).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
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
#: An archive no server has started on for this many days is removed when a server keeps a new
#: one in its folder.
UNUSED_DAYS = 14


def _java() -> Path | None:
    """The java that spark-submit runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive(directory: Path) -> Path | None:
    """The archive of this pyspark installation and Java runtime in `directory` (None without
    a java): the JVM takes an archive only on the class path and JVM it was written with, so
    another installation of the same version (another venv, a reinstall) gets its own."""
    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    identity = [f"{path}:{path.stat().st_size}:{path.stat().st_mtime_ns}"
                for path in (java, jars) if path.exists()]
    key = hashlib.sha256("|".join(identity).encode()).hexdigest()
    return directory / f"spark-{pyspark.__version__}-{key[:12]}.jsa"


def pending(final: Path, port: int) -> Path:
    """Where a server of `port` without an archive writes one as it exits."""
    return final.with_name(f"{final.name}.{port}.pending")


def java_options(directory: Path | None, port: int, user_options: str) -> list[str]:
    """The server's class-data sharing flags: map the archive, or write it at exit. None when
    the user's own options decide, or the folder cannot be used (a path with a space would be
    split by Spark's option parsing; a folder that cannot be made): the server runs without."""
    if directory is None or any(choice in user_options for choice in USER_CHOICES):
        return []
    final = archive(directory.expanduser())
    if final is None or " " in str(final):
        return []
    if final.exists():
        return [f"-XX:SharedArchiveFile={final}", *QUIET]
    written = pending(final, port)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        written.unlink(missing_ok=True)  # an earlier server's, partial: never kept for this one
    except OSError:
        return []
    return [f"-XX:ArchiveClassesAtExit={written}", *QUIET]


def _flag(options: list[str], name: str) -> str | None:
    """The value of the JVM flag ``-XX:<name>=`` in `options`, if there."""
    prefix = f"-XX:{name}="
    return next((o[len(prefix):] for o in options if o.startswith(prefix)), None)


def writes(options: list[str]) -> bool:
    """Whether a server started with `options` writes an archive as it exits."""
    return _flag(options, "ArchiveClassesAtExit") is not None


def forget_if_unmapped(options: list[str], pid: int) -> bool:
    """After a server started with `options` answers: if it was to map an archive and its
    memory map shows none, the JVM turned it down (another class path or JVM; its message is
    off), so remove it: the next server writes a new one. True if removed. An archive the
    server mapped is touched: in use (`prune`)."""
    mapped = _flag(options, "SharedArchiveFile")
    maps = Path(f"/proc/{pid}/maps")
    if mapped is None or not maps.exists():
        return False
    try:
        shown = maps.read_text()  # by the file's real path (a symlinked folder resolved)
    except OSError:  # the process is gone: nothing learnt
        return False
    if mapped in shown or str(Path(mapped).resolve()) in shown:
        try:
            os.utime(mapped)
        except OSError:  # another user's archive, a read-only folder: left as it is
            pass
        return False
    Path(mapped).unlink(missing_ok=True)
    return True


def prune(directory: Path, kept: Path) -> list[Path]:
    """Remove the archives in `directory` but `kept` that no server has started on for
    `UNUSED_DAYS` (by their modification time: written, or last mapped); the paths removed.
    Only archives are looked at (``spark-*.jsa``), not a server's pending file."""
    cutoff = time.time() - UNUSED_DAYS * 86400
    removed = []
    for path in directory.glob("spark-*.jsa"):
        try:
            if path != kept and path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


def keep(options: list[str], *, ended_of_itself: bool) -> Path | None:
    """After a server started with `options` ended: its archive, if it wrote one and ended of
    itself (a server killed may have left a partial file, which is removed)."""
    flag = _flag(options, "ArchiveClassesAtExit")
    written = None if flag is None else Path(flag)
    if written is None or not written.exists():
        return None
    if not ended_of_itself or written.stat().st_size == 0:
        written.unlink(missing_ok=True)
        return None
    final = written.with_name(written.name.rsplit(".", 2)[0])
    os.replace(written, final)  # atomic: a server starting now maps all of it or none
    prune(final.parent, final)
    return final
