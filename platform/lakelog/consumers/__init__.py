"""Consumers: exactly-once microbatches over topics, with committed offsets and lag.

- `consumer` — what a consumer is: its `Output`s (each with a `Role`), what its transform sees
  (`BatchInput`) and returns (`Changes`), the `Consumer` declaration;
- `batch` — one microbatch in its commit order (plan, process, write, commit), and
  `run_until_caught_up`;
- `checkpoints` — committed offsets, the write-ahead plan and the consumer's state;
- `watermarks` — the event-time watermark kept in that state;
- `backlog` — how far behind a consumer is (lag per log partition, age of the oldest record);
- `resets` — moving committed offsets, and rebuilding outputs where a replay would double-count.
"""

from lakelog.consumers.backlog import PartitionLag, lag
from lakelog.consumers.batch import BatchResult, make_plan, run_batch, run_until_caught_up
from lakelog.consumers.consumer import BatchInput, Changes, Consumer, Output, Role

__all__ = [
    "BatchInput",
    "BatchResult",
    "Changes",
    "Consumer",
    "Output",
    "PartitionLag",
    "Role",
    "lag",
    "make_plan",
    "run_batch",
    "run_until_caught_up",
]
