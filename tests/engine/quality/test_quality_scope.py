"""A topic's check after a version that passed validates only the rows appended since, and still
finds what is wrong with them, at the boundary to the rows already checked too."""

from __future__ import annotations

from pyspark.sql import functions as F
from quality_helpers import append_page_views, failed

from lakelog.demo.shop import TOPICS
from lakelog.demo.shop_cdc import CHANGELOGS
from lakelog.quality import scope as scopes
from lakelog.quality.scope import topic_scope
from lakelog.quality.validate import validate

PAGE_VIEWS = TOPICS["page_views"]


def scoped(lake, passed, topic=PAGE_VIEWS):
    return topic_scope(lake, topic, lake.snapshot(topic.path), passed=passed)


def test_rows_appended_since_a_passing_version_are_validated_alone(lake, spark):
    append_page_views(lake, spark, PAGE_VIEWS, 6)
    passed = lake.snapshot(PAGE_VIEWS.path).version
    nothing = scoped(lake, passed)
    assert nothing.rows is None and nothing.description.startswith("no rows added since")
    assert nothing.suite is None  # nothing to validate: no suite built (GX not needed)

    append_page_views(lake, spark, PAGE_VIEWS, 4)
    scope = scoped(lake, passed)
    assert scope.description == f"rows added since version {passed}, which passed"
    assert scope.rows.count() == 4 and scope.small
    [outcome] = validate(scope.rows, [scope.suite], cache=not scope.small)
    assert outcome.success, failed(outcome)

    whole = scoped(lake, None)
    assert whole.description == "the whole table" and whole.rows.count() == 10


def test_only_files_of_a_few_bytes_in_all_are_small(lake, spark, monkeypatch):
    append_page_views(lake, spark, PAGE_VIEWS, 6)
    snapshot = lake.snapshot(PAGE_VIEWS.path)
    size = sum(f.size for f in snapshot.files())
    monkeypatch.setattr(scopes, "SMALL_BYTES", size)
    assert scoped(lake, None).small
    monkeypatch.setattr(scopes, "SMALL_BYTES", size - 1)
    assert not scoped(lake, None).small


def test_a_new_row_at_a_checked_offset_or_past_a_gap_fails(lake, spark):
    append_page_views(lake, spark, PAGE_VIEWS, 6)
    passed = lake.snapshot(PAGE_VIEWS.path).version
    log = lake.read(lake.snapshot(PAGE_VIEWS.path))
    first = log.orderBy("partition", "offset").first()
    head = log.where(F.col("partition") == first.partition).count()
    one = log.where((F.col("partition") == first.partition) & (F.col("offset") == 0))
    # Behind lakelog's back: a copy of offset 0 (unique among the new rows, not in the log),
    # and a row two offsets past the head.
    lake.write(lake.snapshot(PAGE_VIEWS.path), one.unionByName(
        one.withColumn("offset", F.lit(head + 2).cast("long"))))

    scope = scoped(lake, passed)
    assert scope.rows.count() == 2
    for cache in (False, True):
        [outcome] = validate(scope.rows, [scope.suite], cache=cache)
        gaps = failed(outcome)["expect_no_unexpected_rows"]
        assert gaps.unexpected_count == 2
        assert {(r["partition"], r["offset"]) for r in gaps.unexpected_sample} == {
            (first.partition, 0), (first.partition, head + 2)}


def test_compacted_topics_and_unknown_versions_are_validated_whole(lake, spark):
    append_page_views(lake, spark, PAGE_VIEWS, 3)
    version = lake.snapshot(PAGE_VIEWS.path).version
    assert scoped(lake, version + 5).description == "the whole table"  # not a version it has
    changelog = next(iter(CHANGELOGS.values()))
    lake.create_table(changelog.path, changelog.table_schema, partition_by=["partition"])
    assert scoped(lake, 0, changelog).description == "the whole table"

