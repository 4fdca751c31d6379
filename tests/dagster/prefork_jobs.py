"""A job for the prefork launcher's tests: its op records what its run worker is (pid, process
name, which modules it found imported, the run's worker tag) to the file `out` names, then sleeps
`sleep` seconds, or leaves the process at once (`exit`). Importing this module appends the
importing process's pid to the file `$PREFORK_TEST_IMPORTS` names. The tests rewrite `VERSION`
between launches."""

import json
import os
import sys
import time
from pathlib import Path

import dagster as dg

VERSION = 1

if "PREFORK_TEST_IMPORTS" in os.environ:
    with open(os.environ["PREFORK_TEST_IMPORTS"], "a") as imports:
        imports.write(f"{os.getpid()}\n")


@dg.op(config_schema={"out": str, "sleep": float, "exit": dg.Field(bool, default_value=False)})
def report(context: dg.OpExecutionContext) -> None:
    Path(context.op_config["out"]).write_text(json.dumps({
        "pid": os.getpid(),
        "name": Path("/proc/self/comm").read_text().strip(),
        "preloaded_wave": "wave" in sys.modules,
        "version": VERSION,
        "worker_tag": context.run.tags.get("lakelog/run_worker"),
    }))
    if context.op_config["exit"]:
        os._exit(0)  # a worker that ends without ending its run
    time.sleep(context.op_config["sleep"])


@dg.job(executor_def=dg.in_process_executor)  # the op runs in the run worker itself
def prefork_job() -> None:
    report()
