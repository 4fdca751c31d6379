"""The partitioned log: topics as append-only Delta tables, fed from the landing zone.

- `topics` — topic declarations (schema, key, log partitions, retention, compaction);
- `records` — parsing and validating NDJSON records against a topic;
- `landing` — the landing zone and its manifest of ingested files;
- `ingest` — landing files into a topic exactly once (validate, dead-letter, de-duplicate,
  append);
- `dead_letters` — the table of records that could not be appended, and why;
- `offsets` — appending with offsets, reading by offset or time, log-partition state;
- `retention` — advancing a log partition's start by removing its oldest files;
- `compaction` — keeping the latest record per key in closed segments.
"""
