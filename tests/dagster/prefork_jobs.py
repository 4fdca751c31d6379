"""A job for the prefork launcher's tests: its op records what its run worker is (pid, process
name, which modules it found imported) to the file `out` names, then sleeps `sleep` seconds.
The tests rewrite `VERSION` between launches."""

import json
import os
import sys
import time
from pathlib import Path

import dagster as dg

VERSION = 1


@dg.op(config_schema={"out": str, "sleep": float})
def report(context: dg.OpExecutionContext) -> None:
    Path(context.op_config["out"]).write_text(json.dumps({
        "pid": os.getpid(),
        "name": Path("/proc/self/comm").read_text().strip(),
        "preloaded_wave": "wave" in sys.modules,
        "version": VERSION,
    }))
    time.sleep(context.op_config["sleep"])


@dg.job(executor_def=dg.in_process_executor)  # the op runs in the run worker itself
def prefork_job() -> None:
    report()
