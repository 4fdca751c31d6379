"""The landing zone's copy of a data subject: NDJSON lines rewritten out of the files.

Landing files stay after ingest (they are the raw input, and a file that grows is taken again),
so the subject's lines are removed from them too. The manifest learns each file's new size
first (`lakelog.log.landing.save_resized`), then the file is replaced atomically: ingest never
takes a rewritten file again, and a crash in between leaves the old file, known, to the next
erasure. Files not ingested yet lose the lines as well; the records never reach the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from lakelog.erasure.subject import line_holds
from lakelog.lake import Lake
from lakelog.log.landing import SUFFIXES, landing_path, load_manifest, save_resized
from lakelog.pipeline import Pipeline


@dataclass(frozen=True)
class FileErasure:
    path: str
    lines: int  # lines removed
    size_before: int
    size_after: int


def erase_landing(lake: Lake, pipeline: Pipeline, subject: str, *, now: datetime
                  ) -> list[FileErasure]:
    """Remove the subject's lines from every landing file of the pipeline's landed topics."""
    done, needle = [], subject.encode("utf-8")
    for topic in pipeline.landed_topics:
        base = landing_path(topic)
        rewrites = {}
        for relative, size in lake.list_files(base):
            if not relative.endswith(SUFFIXES):
                continue
            path = f"{base}/{relative}"
            data = lake.read_bytes(path)
            if needle not in data:  # a line of the subject holds its text: most files don't
                continue
            lines = data.splitlines(keepends=True)
            kept = [x for x in lines if needle not in x or not line_holds(
                x.decode("utf-8", errors="replace").strip(), pipeline.subject_columns, subject)]
            if len(kept) < len(lines):
                body = b"".join(kept)
                rewrites[path] = (body, FileErasure(path, len(lines) - len(kept), size, len(body)))
        if not rewrites:
            continue
        save_resized(lake, load_manifest(lake, topic),
                     {p: (e.size_before, e.size_after) for p, (_, e) in rewrites.items()}, now=now)
        for path, (body, erased) in rewrites.items():
            lake.replace_file(path, body)
            done.append(erased)
    return done
