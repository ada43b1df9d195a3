"""Source options as Spark's Kafka connector takes them: maxRecordsPerPartition, a batch refusing
startingOffsets=latest, and the bootstrap option named as users write it (no Spark needed)."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict

from tidemark.spark.options import OptionError, parse_sink_options, parse_source_options
from tidemark.spark.source import split_ranges
from tidemark.spark.topic_reader import OffsetRange

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def parse(streaming: bool, **options: str):
    return parse_source_options(CaseInsensitiveDict({**BOOTSTRAP, **options}), streaming=streaming)


def test_max_records_per_partition_is_taken_as_spark_spells_it():
    assert parse(False, subscribe="a", maxRecordsPerPartition="10").max_records_per_partition == 10
    with pytest.raises(OptionError, match='"maxRecordsPerPartition" must be a positive integer'):
        parse(False, subscribe="a", maxRecordsPerPartition="0")


def piece(start: int, end: int, partition: int = 0) -> OffsetRange:
    return OffsetRange("t", partition, start, end, {}, True, 1000)


def test_max_records_per_partition_splits_each_range_then_min_partitions_applies():
    ranges = [piece(0, 25), piece(100, 105, 1)]
    assert [(r.partition, r.start, r.end) for r in split_ranges(ranges, None, 10)] == [
        (0, 0, 9), (0, 9, 17), (0, 17, 25), (1, 100, 105)]
    # 4 pieces (9, 8, 8, 5), minPartitions 8: each split again in proportion to its size (rounded).
    split = split_ranges(ranges, 8, 10)
    assert [r.end - r.start for r in split] == [5, 4, 4, 4, 4, 4, 5]
    assert sum(r.end - r.start for r in split) == 30


@pytest.mark.parametrize("starting", ["latest", "LATEST", '{"a": {"0": -1}}'])
def test_a_batch_starting_at_latest_is_refused(starting):
    """It read nothing, silently; Spark's connector refuses it."""
    with pytest.raises(OptionError, match="streaming queries only"):
        parse(False, subscribe="a", startingOffsets=starting)
    assert parse(True, subscribe="a", startingOffsets=starting).starting.kind in ("latest", "specific")


def test_the_bootstrap_option_is_named_as_spark_spells_it():
    with pytest.raises(OptionError, match='^option "kafka.bootstrap.servers" or "bootstrap.servers" is required$'):
        parse_source_options(CaseInsensitiveDict({"subscribe": "a"}), streaming=True)
    with pytest.raises(OptionError, match='"kafka.bootstrap.servers" or "bootstrap.servers" is required'):
        parse_sink_options(CaseInsensitiveDict({"topic": "a"}))
