"""The spark-sql-kafka-0-10 options users bring, with the connector's meaning: parsing and planning
against a stand-in cluster (no Spark, no broker); tests/spark/test_source.py reads with them."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tidemark.spark.cluster import ClusterClient
from tidemark.spark.options import OptionError, offsets_to_json, parse_duration_ms, parse_source_options
from tidemark.spark.source import TopicBatchReader, TopicStreamReader, split_ranges

BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:9092"}
MINUTE = 60_000


def parse(streaming=False, **options):
    return parse_source_options(CaseInsensitiveDict({**BOOTSTRAP, "subscribe": "t", **options}), streaming=streaming)


class Cluster:
    """Partition t-0 with records at offsets 0..9 stamped i minutes; t-1 with 0..4 stamped 10 + i."""

    stamps = {("t", 0): [i * MINUTE for i in range(10)], ("t", 1): [(10 + i) * MINUTE for i in range(5)]}

    def partitions(self, _subscription):
        return sorted(self.stamps)

    def earliest(self, partitions):
        return {p: 0 for p in partitions}

    def latest(self, partitions):
        return {p: len(self.stamps[p]) for p in partitions}

    def for_timestamps(self, timestamps):
        return {p: next((o for o, s in enumerate(self.stamps[p]) if s >= ts), -1) for p, ts in timestamps.items()}

    def commit(self, _group, _offsets):
        return True


def batch_ranges(**options):
    reader = TopicBatchReader(parse(**options))
    reader.planner._client = Cluster()
    return [(r.topic, r.partition, r.start, r.end) for r in reader.partitions()]


def test_starting_and_ending_by_timestamp():
    # The first offset stamped at or after the timestamp; startingTimestamp wins over the others.
    assert batch_ranges(startingTimestamp=str(3 * MINUTE), startingOffsetsByTimestamp='{"t": {"0": 0, "1": 0}}',
                        startingOffsets="earliest", endingTimestamp=str(12 * MINUTE)) == [
        ("t", 0, 3, 10), ("t", 1, 0, 2)]
    assert batch_ranges(startingOffsetsByTimestamp=f'{{"t": {{"0": {5 * MINUTE + 1}, "1": {11 * MINUTE}}}}}',
                        endingOffsetsByTimestamp=f'{{"t": {{"0": {8 * MINUTE}, "1": {99 * MINUTE}}}}}') == [
        ("t", 0, 6, 8), ("t", 1, 1, 5)]  # an ending timestamp past every record ends at the latest offset


def test_a_starting_timestamp_past_every_record_follows_the_strategy():
    with pytest.raises(OptionError, match=r"no record stamped at or after the timestamp in t-0 \(600000\)"):
        batch_ranges(startingOffsetsByTimestamp=f'{{"t": {{"0": {10 * MINUTE}, "1": 0}}}}')
    assert batch_ranges(startingOffsetsByTimestamp=f'{{"t": {{"0": {10 * MINUTE}, "1": 0}}}}',
                        startingOffsetsByTimestampStrategy="latest") == [("t", 1, 0, 5)]  # t-0: from 10, nothing yet
    with pytest.raises(OptionError, match="must give a timestamp for every partition read; missing: t-1"):
        batch_ranges(startingOffsetsByTimestamp='{"t": {"0": 0}}')


def test_min_partitions_splits_big_partitions():
    # 15 offsets over 5 tasks: t-0 (10) in 3 pieces, t-1 (5) in 2, sizes differing by one at most.
    assert batch_ranges(minPartitions="5") == [
        ("t", 0, 0, 4), ("t", 0, 4, 7), ("t", 0, 7, 10), ("t", 1, 0, 3), ("t", 1, 3, 5)]
    assert batch_ranges(minPartitions="2") == [("t", 0, 0, 10), ("t", 1, 0, 5)]  # already as many
    ranges = TopicBatchReader(parse(minPartitions="100"))
    ranges.planner._client = Cluster()
    pieces = ranges.partitions()
    assert [(r.start, r.end) for r in pieces if r.partition == 1] == [(i, i + 1) for i in range(5)]
    assert split_ranges(pieces, None) == pieces


def test_group_id_prefix_names_the_readers_group():
    reader = TopicBatchReader(parse(groupIdPrefix="audit"))
    reader.planner._client = Cluster()
    ids = {r.consumer_config["group.id"] for r in reader.partitions()}
    assert len(ids) == 1 and ids.pop().startswith("audit-")
    reader = TopicBatchReader(parse(**{"kafka.group.id": "mine"}))
    reader.planner._client = Cluster()
    assert {r.consumer_config["group.id"] for r in reader.partitions()} == {"mine"}
    assert parse().group_id_prefix == "spark-kafka-source"


def test_include_headers_is_carried_to_the_tasks():
    reader = TopicBatchReader(parse(includeHeaders="true"))
    reader.planner._client = Cluster()
    assert all(r.include_headers for r in reader.partitions())
    assert parse().include_headers is False


def test_min_offsets_per_trigger_waits_for_data_or_max_trigger_delay():
    reader = TopicStreamReader(parse(streaming=True, minOffsetsPerTrigger="20", maxTriggerDelay="5m"))
    cluster = reader.planner._client = Cluster()
    now = [0.0]
    reader.clock = lambda: now[0]
    start = offsets_to_json({("t", 0): 0, ("t", 1): 0})
    reader._initial = {("t", 0): 0, ("t", 1): 0}
    # 15 available, fewer than 20: the first trigger still gets its batch (no batch yet to wait from).
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {"t": {"0": 10, "1": 5}}
    cluster.stamps = {("t", 0): [0] * 12, ("t", 1): [0] * 5}  # 2 more
    assert reader.latestOffset(first, ReadAllAvailable()) == first  # held back
    now[0] = 299.999
    assert reader.latestOffset(first, ReadAllAvailable()) == first
    now[0] = 300.0  # maxTriggerDelay since the last batch with data
    assert reader.latestOffset(first, ReadAllAvailable()) == {"t": {"0": 12, "1": 5}}
    cluster.stamps = {("t", 0): [0] * 32, ("t", 1): [0] * 5}  # 20 more: enough at once
    assert reader.latestOffset({"t": {"0": 12, "1": 5}}, ReadAllAvailable()) == {"t": {"0": 32, "1": 5}}


def test_durations():
    assert [parse_duration_ms("d", v) for v in ("15m", "30s", "500ms", "1h", "250")] == [
        900_000, 30_000, 500, 3_600_000, 250]
    with pytest.raises(OptionError, match='"maxTriggerDelay" must be a duration'):
        parse(streaming=True, maxTriggerDelay="soon")
    with pytest.raises(OptionError, match="for batch queries only"):
        parse(streaming=True, endingTimestamp="0")


class FlakyAdmin:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def list_offsets(self, request, request_timeout):
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))

        class Done:
            offset = 7

            def result(self, timeout):
                return self

        return {tp: Done() for tp in request}


@pytest.mark.parametrize("failures, retries, ok", [(0, 0, True), (3, 3, True), (4, 3, False)])
def test_fetch_offset_retries(failures, retries, ok):
    options = parse(**{"fetchOffset.numRetries": str(retries), "fetchOffset.retryIntervalMs": "0"})
    assert (options.fetch_offset_retries, options.fetch_offset_retry_interval_ms) == (retries, 0)
    client = ClusterClient(options.consumer_config(), options.fetch_offset_retries,
                           options.fetch_offset_retry_interval_ms)
    client._admin = FlakyAdmin(failures)
    if ok:
        assert client.latest([("t", 0)]) == {("t", 0): 7}
    else:
        with pytest.raises(KafkaException):
            client.latest([("t", 0)])
    assert client._admin.calls == min(failures, retries) + 1
    assert parse().fetch_offset_retries == 3 and parse().fetch_offset_retry_interval_ms == 10
