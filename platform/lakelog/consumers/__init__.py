"""Consumers: exactly-once microbatches over topics, with committed offsets and lag.

- `consumer` — what a consumer is: its `Output`s (each with a `Role`), what its transform sees
  (`BatchInput`) and returns (`Changes`), the `Consumer` declaration;
- `batch` — one microbatch in its commit order (plan, process, write, commit);
- `catch_up` — `run_until_caught_up`, batch after batch;
- `checkpoints` — committed offsets, the write-ahead plan and the consumer's state;
- `definitions` — a stateful consumer's declaration, kept there: declared otherwise, refused;
- `units` — what one checkpoint covers: the consumer whole, or one log partition of a group;
- `membership`, `groups` — consumer groups: members sharing a consumer's log partitions;
- `watermarks` — the event-time watermark kept in that state;
- `backlog` — how far behind a consumer is (lag per log partition, age of the oldest record);
- `resets` — moving committed offsets, and rebuilding outputs where a replay would double-count.
"""

from lakelog.consumers.backlog import PartitionLag, lag
from lakelog.consumers.batch import BatchResult, make_plan, run_batch
from lakelog.consumers.catch_up import run_until_caught_up
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
