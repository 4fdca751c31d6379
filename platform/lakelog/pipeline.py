"""A pipeline declared once: what the CLI, the Dagster code location and the main job all read.

A user declares one `Pipeline` in a module of their own — topics, consumers, windowed
aggregates, joins, percolators, patterns, captured sources, event-sourced aggregates and a folder of SQL
models — and
points every tool at it (``lakelog --pipeline module[:attribute]``,
``build_definitions(pipeline)``).
The declaration is checked as a whole when it is made, so a mistake (two topics of one name, a
consumer of an undeclared topic, a missing models folder, a model's bad ref) is one
`ConfigError` naming every problem, before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Union

from pyspark.sql.types import StructType

from lakelog.cdc.captured import CapturedSource
from lakelog.cdc.change_streams import ChangeStream
from lakelog.cdc.compacted import CompactedTable
from lakelog.consumers import Consumer
from lakelog.errors import ConfigError, UnknownConsumerError, UnknownTopicError
from lakelog.joins import AsOfJoin, ChangelogJoin, EnrichJoin, TableJoin, WindowJoin
from lakelog.log.topics import Topic
from lakelog.patterns import Pattern
from lakelog.search import Percolator
from lakelog.sourcing import Aggregate
from lakelog.views import ModelGraph, load_models
from lakelog.windows import WindowedAggregate
from lakelog.windows.replay import replay_path

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")

Join = Union[WindowJoin, EnrichJoin, AsOfJoin, TableJoin, ChangelogJoin]
JOIN_TYPES = (WindowJoin, EnrichJoin, AsOfJoin, TableJoin, ChangelogJoin)


@dataclass(frozen=True)
class Pipeline:
    """Everything one lakelog deployment keeps live, declared in one place.

    `topics` are filled from the landing zone (``<home>/landing/<topic>/``); captured `sources`
    add their changelog topics (landed by their capture) and the consumers of their compacted
    and history tables; each event-sourced aggregate of `aggregates`
    (`lakelog.sourcing.Aggregate`) adds its consumer and the topic its outbox is relayed to;
    `windows`, `joins`, `percolators` (stored queries matched against a topic,
    `lakelog.search`) and `patterns` (complex event processing, `lakelog.patterns`) add their
    consumers. `models` is the folder of SQL models (``*.sql``),
    which may ref any table the pipeline writes. `change_streams` names keyed tables the pipeline
    writes (``tables/customers``) whose changes are published as the changelog topics
    ``changes.<path with dots>`` (`lakelog.cdc.change_streams`). `subject_columns` name the
    columns that identify a data subject (a user id), wherever a table has them: what
    `lakelog.erasure` erases a subject by. `groups` maps consumer names to the number of members
    that share the consumer's log partitions as a consumer group (`lakelog.consumers.groups`),
    each member a Dagster run of its own. Each collection may be
    given as any iterable (or a mapping by name) and is kept as a tuple, so the declaration
    cannot change once checked.
    """

    name: str
    topics: tuple[Topic, ...] = ()
    consumers: tuple[Consumer, ...] = ()
    windows: tuple[WindowedAggregate, ...] = ()
    joins: tuple[Join, ...] = ()
    percolators: tuple[Percolator, ...] = ()
    patterns: tuple[Pattern, ...] = ()
    sources: tuple[CapturedSource, ...] = ()
    aggregates: tuple[Aggregate, ...] = ()
    models: Path | None = None
    change_streams: tuple[str, ...] = ()
    subject_columns: tuple[str, ...] = ()
    groups: Mapping[str, int] = field(default_factory=dict, hash=False)
    model_graph: ModelGraph | None = field(init=False, repr=False, compare=False, default=None)
    #: The `change_streams`, resolved to their tables' outputs.
    published_streams: tuple[ChangeStream, ...] = field(init=False, repr=False, compare=False,
                                                        default=())

    def __post_init__(self) -> None:
        named = isinstance(self.name, str) and NAME.match(self.name)
        problems = [] if named else [
            f"name {self.name!r} must be letters, digits and '_', starting with a letter"]
        kinds_ok = True
        for attribute, kinds, label in (
            ("topics", Topic, "Topic"),
            ("consumers", Consumer, "Consumer"),
            ("windows", WindowedAggregate, "WindowedAggregate"),
            ("joins", JOIN_TYPES, "WindowJoin, EnrichJoin, AsOfJoin, TableJoin or ChangelogJoin"),
            ("percolators", Percolator, "Percolator"),
            ("patterns", Pattern, "Pattern"),
            ("sources", CapturedSource, "CapturedSource"),
            ("aggregates", Aggregate, "lakelog.sourcing.Aggregate"),
            ("change_streams", str, "table path"),
            ("subject_columns", str, "column name"),
        ):
            items = _as_tuple(getattr(self, attribute))
            object.__setattr__(self, attribute, items)
            wrong = [i for i in items if not isinstance(i, kinds)]
            if wrong:
                kinds_ok = False
                problems.append(f"{attribute} must each be a {label}, not {_kind(wrong[0])}")
        if self.models is not None:
            object.__setattr__(self, "models", Path(self.models))
        problems += self._group_problems()
        if kinds_ok:
            problems += self._graph_problems()
        if not problems and self.models is not None:  # model refs need a sound graph
            problems += self._load_models()
        elif self.models is not None and not self.models.is_dir():
            problems.append(f"models folder {self.models} does not exist")
        if problems:
            raise ConfigError(f"pipeline {self.name}: " + "; ".join(problems))

    def _graph_problems(self) -> list[str]:
        problems = self._stream_problems()
        topics = [*self.topics, *(t for s in self.sources for t in s.changelogs.values()),
                  *(a.outbox_topic for a in self.aggregates),
                  *(s.topic for s in self.published_streams)]
        problems += _duplicates("topic", [t.name for t in topics])
        consumers, grouping = self._grouped(self._declared_consumers)
        problems += grouping
        problems += _duplicates("consumer", [c.name for c in consumers])
        problems += _duplicates("captured source", [s.server_name for s in self.sources])
        writers: dict[str, list[str]] = {}
        for consumer in consumers:
            for output in consumer.outputs:
                writers.setdefault(output.path, []).append(consumer.name)
        problems += [f"table {path} is written by more than one consumer ({', '.join(names)})"
                     for path, names in writers.items() if len(names) > 1]
        known = {t.name for t in topics}
        tables = set(writers) | {t.path for t in topics}
        for consumer in consumers:
            missing = [t for t in consumer.topics if t not in known]
            if missing:
                problems.append(f"consumer {consumer.name} reads undeclared topic(s) "
                                f"{', '.join(missing)}")
            unwritten = [p for p in consumer.reads if p not in tables]
            if unwritten:
                problems.append(f"consumer {consumer.name} reads {', '.join(unwritten)}, which "
                                "no consumer of the pipeline writes")
        return problems

    def _group_problems(self) -> list[str]:
        if not isinstance(self.groups, Mapping):
            wrong = _kind(self.groups)
            object.__setattr__(self, "groups", {})
            return [f"groups must map consumer names to member counts, not {wrong}"]
        object.__setattr__(self, "groups", dict(self.groups))
        return [f"group {name!r}: members must be a whole number >= 1, not {n!r}"
                for name, n in self.groups.items() if not _member_count(n)]

    def _grouped(self, consumers: list[Consumer]) -> tuple[list[Consumer], list[str]]:
        """`consumers` with the declared `groups` applied, and what is wrong with them."""
        names = {c.name for c in consumers}
        problems = [f"group {name!r}: no consumer of the pipeline has that name"
                    for name in self.groups if name not in names]
        deciders = {a.consumer.name for a in self.aggregates}
        found = []
        for consumer in consumers:
            members = self.groups.get(consumer.name)
            if not _member_count(members):  # not grouped, or reported by _group_problems
                found.append(consumer)
                continue
            if consumer.name in deciders:
                problems.append(f"group {consumer.name!r}: an event-sourced aggregate decides "
                                "each command against all before it; it runs alone")
                found.append(consumer)
                continue
            try:
                found.append(replace(consumer, members=members))
            except ConfigError as exc:
                problems.append(f"group {consumer.name!r}: {exc}")
                found.append(consumer)
        return found, problems

    def _stream_problems(self) -> list[str]:
        outputs = {o.path: o for c in self._consumer_list for o in c.outputs}
        problems = _duplicates("change stream of table", list(self.change_streams))
        found = []
        for path in dict.fromkeys(self.change_streams):
            output = outputs.get(path)
            if output is None:
                problems.append(f"change stream of {path}: no consumer of the pipeline writes it")
            elif not output.keys:
                problems.append(f"change stream of {path}: the table has no keys")
            else:
                found.append(ChangeStream(output))
        object.__setattr__(self, "published_streams", tuple(found))
        return problems

    def _load_models(self) -> list[str]:
        assert self.models is not None
        if not self.models.is_dir():
            return [f"models folder {self.models} does not exist"]
        try:
            graph = load_models(self.models, self.table_paths)
        except ConfigError as exc:  # a model's problem, naming its file
            return [str(exc)]
        object.__setattr__(self, "model_graph", graph)
        return []

    @property
    def _consumer_list(self) -> list[Consumer]:
        return self._grouped(self._declared_consumers)[0]

    @property
    def _declared_consumers(self) -> list[Consumer]:
        return [
            *(c for s in self.sources for c in s.consumers.values()),
            *self.consumers,
            *(a.consumer for a in self.aggregates),
            *(w.consumer for w in self.windows),
            *(j.consumer for j in self.joins),
            *(p.consumer for p in self.percolators),
            *(p.consumer for p in self.patterns),
        ]

    @cached_property
    def landed_topics(self) -> dict[str, Topic]:
        """Topics ingested from the landing zone, by name: the declared topics and changelogs."""
        found = {t.name: t for t in self.topics}
        found.update({n: t for s in self.sources for n, t in s.changelogs.items()})
        return found

    @cached_property
    def all_topics(self) -> dict[str, Topic]:
        """Every topic by name: the landed ones, those aggregates relay their outbox to and the
        tables' change streams."""
        return {**self.landed_topics,
                **{a.outbox_topic.name: a.outbox_topic for a in self.aggregates},
                **{s.topic.name: s.topic for s in self.published_streams}}

    @cached_property
    def all_consumers(self) -> dict[str, Consumer]:
        """Every consumer by name: the tables' of captured sources, the declared ones, the
        aggregates', the windows', the joins', the percolators' and the patterns'."""
        return {c.name: c for c in self._consumer_list}

    @cached_property
    def table_paths(self) -> frozenset[str]:
        """Every table the pipeline writes: topic logs and consumer outputs (what models ref)."""
        return frozenset({t.path for t in self.all_topics.values()}
                         | {o.path for c in self.all_consumers.values() for o in c.outputs})

    @property
    def compacted_tables(self) -> list[CompactedTable]:
        return [t for s in self.sources for t in s.compacted.values()]

    def topic(self, name: str) -> Topic:
        if name not in self.all_topics:
            raise UnknownTopicError(f"unknown topic {name!r} in pipeline {self.name}; topics: "
                                    f"{', '.join(sorted(self.all_topics)) or 'none'}")
        return self.all_topics[name]

    def consumer(self, name: str) -> Consumer:
        if name not in self.all_consumers:
            raise UnknownConsumerError(
                f"unknown consumer {name!r} in pipeline {self.name}; consumers: "
                f"{', '.join(sorted(self.all_consumers)) or 'none'}"
            )
        return self.all_consumers[name]

    def replay_hazards(self, name: str) -> tuple[str, ...]:
        """Why records replayed into consumer `name` (its offsets moved back) would be counted
        twice, one reason each; empty when a replay is harmless: its outputs are plain appends
        (the records are appended again, as a Kafka consumer reset delivers them again), or it
        keeps a captured source's tables, whose upserts order and de-duplicate the changes by
        changelog position, so a replayed change is never applied twice."""
        consumer = self.consumer(name)
        if any(name in s.consumers for s in self.sources):
            return ()
        found = [f"{o.path} is keyed by {', '.join(o.keys)}: replayed records would change "
                 "its rows again" for o in consumer.outputs if o.keys]
        if consumer.advance is not None:
            found.append("its checkpoint state (e.g. a watermark) has already moved past the "
                         "replayed records")
        return tuple(found)

    def rebuilt_besides(self, name: str) -> tuple[tuple[str, StructType], ...]:
        """Tables a rebuild of consumer `name` empties besides its outputs, with their schemas:
        a windowed aggregate's backfill replays (`replays/<name>`), which the declaration its
        windows had made (a rebuild is how a changed declaration takes over its tables)."""
        return tuple((replay_path(w), w.windows.schema)
                     for w in self.windows if w.consumer.name == name)

    def rebuild_hazards(self, name: str) -> tuple[str, ...]:
        """Why rebuilding consumer `name` from the log would still count something twice: what
        it decided and a relay already published elsewhere would be decided and published again."""
        outputs = {o.path for o in self.consumer(name).outputs}
        return tuple(
            f"its decided events were relayed to topic {a.outbox_topic.name}, which keeps them: a "
            "rebuild would decide and publish them again"
            for a in self.aggregates if a.consumer.name == name
        ) + tuple(
            f"the changes of {s.path} are published to topic {s.topic.name}, whose history a "
            "rebuilt table (a new table) cannot continue"
            for s in self.published_streams if s.path in outputs
        )


def _as_tuple(items: Any) -> tuple:
    """`items` as a tuple: a mapping's values (declarations by name), or the one item given."""
    if isinstance(items, Mapping):
        return tuple(items.values())
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        return (items,)  # a wrong kind is reported by the caller
    return tuple(items)


def _member_count(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def _kind(item: Any) -> str:
    return f"{type(item).__name__} {item!r}"[:80]


def _duplicates(what: str, names: list[str]) -> list[str]:
    seen = sorted({n for n in names if names.count(n) > 1})
    return [f"{what} name {n!r} is declared more than once" for n in seen]
