"""The run queue: Dagster's queued run coordinator, whose daemon has the prefork launcher start
its server as the daemon starts, not at the first run it launches.

Configured in the instance's ``dagster.yaml`` (assets/instance.yaml and deploy/dagster.yaml
do)::

    run_coordinator:
      module: lakelog.assets.run_queue
      class: PreforkQueuedRunCoordinator
      config: {dequeue_interval_seconds: 1}

The prefork server (`lakelog.assets.launcher`) imports Dagster, PySpark, pandas, Great
Expectations and lakelog before it forks run workers: seconds of CPU (4.6 s on 2 cores,
benchmarks/README.md, `bench_dev_latency.py`). Started at the first launch, the first run waited
for all of it; under `dagster dev`, the first file a user lands, or the first asset they
materialize, waited seconds longer than the next. The daemon that launches queued runs now
starts it at its first loop, which is seconds after `dagster dev` or `dagster-daemon run`
starts, while the user is still opening the UI.

The hook: Dagster's queued-run daemon reads its coordinator's `dequeue_use_threads` at every loop,
just before it launches the runs it dequeued, and nothing else reads it. The first read asks the
instance's launcher, when it is lakelog's, to `prepare` the server of this process's Python
(the code location's, under `dagster dev` and a workspace of ``python_module`` or
``python_file``); a run of another Python starts a server of its own at its launch, as before.
Everything else is Dagster's `QueuedRunCoordinator`, with the same configuration.
"""

from __future__ import annotations

import logging
import threading

from dagster._core.run_coordinator.queued_run_coordinator import QueuedRunCoordinator

from lakelog.assets.launcher import PreforkRunLauncher

log = logging.getLogger(__name__)


class PreforkQueuedRunCoordinator(QueuedRunCoordinator):
    """Dagster's queued run coordinator; its daemon prepares the prefork launcher's server."""

    _prepared = False
    _preparing = threading.Lock()

    @property
    def dequeue_use_threads(self) -> bool:
        self._prepare_launcher()
        return super().dequeue_use_threads

    def _prepare_launcher(self) -> None:
        """Once: start the prefork launcher's server (its preloading goes on in the
        background). A launcher that is not lakelog's is left alone; a server that cannot
        start is left for the first launch to report, as without this."""
        with self._preparing:
            if self._prepared:
                return
            self._prepared = True
        try:
            launcher = self._instance.run_launcher
            if isinstance(launcher, PreforkRunLauncher):
                launcher.prepare()
        except Exception:  # noqa: BLE001 - the daemon's loop must go on: the launch will say
            log.exception("lakelog: could not start the prefork server ahead of the first run")
