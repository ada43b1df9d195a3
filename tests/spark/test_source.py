"""The "tidemark" format against a real broker and a real local SparkSession.

Records are produced with confluent-kafka; results are read back through Spark and, for group
commits, through confluent-kafka's AdminClient (OffsetFetch), so every expectation is checked by
a client we did not write.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from tests.conftest import GROUP_SETTINGS, BrokerProcess

QUERY_TIMEOUT_S = 180


@pytest.fixture(scope="module")
def kafka(tmp_path_factory) -> Iterator[BrokerProcess]:
    settings = {**GROUP_SETTINGS, "log.retention.check.interval.ms": "100"}
    process = BrokerProcess(tmp_path_factory.mktemp("spark-source") / "data", settings).start()
    yield process
    process.kill()


def create_topic(kafka: BrokerProcess, name: str, partitions: int, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)


def produce(kafka: BrokerProcess, topic: str, count: int, partitions: int, first: int = 0) -> list[tuple]:
    """count records spread round-robin; returns (partition, key, value) in production order."""
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all", "linger.ms": 5})
    sent = []
    for i in range(first, first + count):
        key, value = f"k{i}".encode(), f"v{i}".encode()
        producer.produce(topic, value, key, partition=i % partitions,
                         headers=[("n", str(i).encode())] if i % 2 else None)
        sent.append((i % partitions, key, value))
    assert producer.flush(30) == 0
    return sent


def committed(kafka: BrokerProcess, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions}


def expected_offsets(sent: list[tuple], partitions: int) -> set[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record, offsets counted per partition from 0."""
    next_offset = [0] * partitions
    rows = set()
    for partition, _key, value in sent:
        rows.add((partition, next_offset[partition], value))
        next_offset[partition] += 1
    return rows


def read_stream(spark, kafka: BrokerProcess, **options):
    reader = spark.readStream.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def run_available_now(df, checkpoint, sink_path=None, query_name=None):
    """Run a streaming query to the end of what is there now; returns its progress reports."""
    writer = df.writeStream.trigger(availableNow=True).option("checkpointLocation", str(checkpoint))
    if sink_path is not None:
        writer = writer.format("parquet").option("path", str(sink_path))
    else:
        writer = writer.format("memory").queryName(query_name)
    query = writer.start()
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish in time"
    if query.exception() is not None:
        raise query.exception()
    return query.recentProgress


@pytest.fixture(scope="module")
def batch_topic(kafka) -> list[tuple]:
    """The "batch" topic: 300 records over 3 partitions (what they were, in production order)."""
    create_topic(kafka, "batch", 3)
    return produce(kafka, "batch", 300, 3)


def test_batch_read_gives_every_record_exactly(spark, kafka, batch_topic):
    sent = batch_topic
    df = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
          .option("subscribe", "batch").option("includeHeaders", "true").load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    assert len(rows) == 300
    assert {(r.partition, r.offset, r.value) for r in rows} == expected_offsets(sent, 3)
    assert all(r.topic == "batch" and r.timestampType == 0 and r.timestamp is not None for r in rows)
    by_value = {r.value: r for r in rows}
    assert by_value[b"v7"].key == b"k7"
    assert [(h.key, h.value) for h in by_value[b"v7"].headers] == [("n", b"7")]
    assert by_value[b"v8"].headers == []


def test_connector_options_timestamps_min_partitions_and_no_headers(spark, kafka):
    """startingTimestamp / endingOffsetsByTimestamp pick offsets by record time, minPartitions
    splits a partition into several tasks without a record lost or read twice, and without
    includeHeaders there is no headers column (the connector's default)."""
    create_topic(kafka, "stamped", 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    base = 1_700_000_000_000
    for i in range(40):  # partition i % 2, stamped base + i seconds: offset i // 2
        producer.produce("stamped", f"v{i}".encode(), partition=i % 2, timestamp=base + i * 1000)
    assert producer.flush(30) == 0
    df = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap).option("subscribe", "stamped")
          .option("startingTimestamp", str(base + 10_000))  # offset 5 in both partitions
          .option("endingOffsetsByTimestamp", f'{{"stamped": {{"0": {base + 30_000}, "1": {base + 99_000}}}}}')
          .option("minPartitions", "6").load())
    assert "headers" not in df.columns
    assert df.rdd.getNumPartitions() == 6
    rows = sorted((r.partition, r.offset, r.value) for r in df.collect())
    assert rows == sorted([(0, o, f"v{2 * o}".encode()) for o in range(5, 15)]
                          + [(1, o, f"v{2 * o + 1}".encode()) for o in range(5, 20)])


def test_batch_read_between_specific_offsets(spark, kafka, batch_topic):
    df = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
          .option("assign", '{"batch": [0, 2]}')
          .option("startingOffsets", '{"batch": {"0": 10, "2": -2}}')
          .option("endingOffsets", '{"batch": {"0": 20, "2": 5}}').load())
    got = sorted((r.partition, r.offset) for r in df.collect())
    assert got == [(0, o) for o in range(10, 20)] + [(2, o) for o in range(5)]


def test_pattern_subscription_and_bad_options(spark, kafka):
    create_topic(kafka, "pattern-a", 1)
    create_topic(kafka, "pattern-b", 1)
    produce(kafka, "pattern-a", 5, 1)
    produce(kafka, "pattern-b", 7, 1)
    df = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
          .option("subscribePattern", "pattern-.*").load())
    assert sorted((r.topic, r.offset) for r in df.collect()) == (
        [("pattern-a", o) for o in range(5)] + [("pattern-b", o) for o in range(7)])
    # Like a Kafka consumer, a topic that does not exist yet is simply not there to read.
    assert (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "not-yet").load().count()) == 0
    with pytest.raises(Exception, match="exactly one of"):
        spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap).load().collect()
    with pytest.raises(Exception, match="every partition read; missing: pattern-a-0"):
        (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
         .option("subscribe", "pattern-a").option("startingOffsets", '{"other": {"0": 1}}').load().collect())


def test_stream_commits_each_batch_and_the_last_to_the_group(spark, kafka, tmp_path):
    create_topic(kafka, "stream", 3)
    sent = produce(kafka, "stream", 300, 3)
    df = read_stream(spark, kafka, subscribe="stream", startingOffsets="earliest",
                     maxOffsetsPerTrigger="70", **{"group.id": "stream-pipeline"})
    progress = run_available_now(df, tmp_path / "checkpoint", query_name="stream_rows")
    # maxOffsetsPerTrigger: 300 records in batches of at most 70 (exactly 70 while there is a backlog).
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [70, 70, 70, 70, 20]
    rows = spark.sql("SELECT partition, offset, value FROM stream_rows").collect()
    assert len(rows) == 300
    assert {(r.partition, r.offset, r.value) for r in rows} == expected_offsets(sent, 3)
    # The last batch of an availableNow run is committed too: the group is at the end.
    assert committed(kafka, "stream-pipeline") == {("stream", 0): 100, ("stream", 1): 100, ("stream", 2): 100}


def test_available_now_reads_the_backlog_in_one_batch_and_commits_its_end(spark, kafka, tmp_path):
    # Without maxOffsetsPerTrigger an availableNow run is one micro-batch over everything there
    # at its start (Spark pays its per-batch cost once), and the group ends at the log end offsets.
    create_topic(kafka, "one-batch", 3)
    sent = produce(kafka, "one-batch", 300, 3)
    df = read_stream(spark, kafka, subscribe="one-batch", startingOffsets="earliest",
                     **{"group.id": "one-batch-pipeline"})
    progress = run_available_now(df, tmp_path / "checkpoint", query_name="one_batch_rows")
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [300]
    rows = spark.sql("SELECT partition, offset, value FROM one_batch_rows").collect()
    assert {(r.partition, r.offset, r.value) for r in rows} == expected_offsets(sent, 3)
    assert len(rows) == 300
    assert committed(kafka, "one-batch-pipeline") == {("one-batch", p): 100 for p in range(3)}


def test_restart_from_checkpoint_has_no_duplicates_or_gaps(spark, kafka, tmp_path):
    create_topic(kafka, "restart-a", 2)
    sent = produce(kafka, "restart-a", 100, 2)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    options = dict(subscribePattern="restart-.*", startingOffsets="earliest", **{"group.id": "restart-pipeline"})
    run_available_now(read_stream(spark, kafka, **options), checkpoint, output)
    sent += produce(kafka, "restart-a", 50, 2, first=100)
    # A new topic matching the pattern appears while the query is down: it is read from its start.
    create_topic(kafka, "restart-b", 1)
    produce(kafka, "restart-b", 10, 1)
    run_available_now(read_stream(spark, kafka, **options), checkpoint, output)
    rows = spark.read.parquet(str(output)).select("topic", "partition", "offset", "value").collect()
    assert len(rows) == 160
    assert {(r.partition, r.offset, r.value) for r in rows if r.topic == "restart-a"} == expected_offsets(sent, 2)
    assert sorted(r.offset for r in rows if r.topic == "restart-b") == list(range(10))
    assert committed(kafka, "restart-pipeline") == {
        ("restart-a", 0): 75, ("restart-a", 1): 75, ("restart-b", 0): 10}


def test_start_from_group_without_checkpoint(spark, kafka, tmp_path):
    create_topic(kafka, "resume", 2)
    produce(kafka, "resume", 40, 2)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    # The group has an offset for partition 0 only; partition 1 falls back to earliest.
    answer = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("resume-pipeline", [TopicPartition("resume", 0, 15)])])
    answer["resume-pipeline"].result(30)
    df = read_stream(spark, kafka, subscribe="resume", startingOffsets="group",
                     **{"group.id": "resume-pipeline", "kafka.auto.offset.reset": "earliest"})
    run_available_now(df, tmp_path / "checkpoint", query_name="resume_rows")
    got = sorted((r.partition, r.offset) for r in spark.sql("SELECT * FROM resume_rows").collect())
    assert got == [(0, o) for o in range(15, 20)] + [(1, o) for o in range(20)]
    assert committed(kafka, "resume-pipeline") == {("resume", 0): 20, ("resume", 1): 20}


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + QUERY_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_running_query_reads_new_records_and_new_partitions(spark, kafka, tmp_path):
    create_topic(kafka, "live", 1)
    produce(kafka, "live", 10, 1)
    df = read_stream(spark, kafka, subscribe="live", startingOffsets="earliest", **{"group.id": "live-pipeline"})
    query = (df.writeStream.format("memory").queryName("live_rows").trigger(processingTime="200 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())

    def count() -> int:
        assert query.exception() is None, query.exception()
        return spark.sql("SELECT count(*) AS n FROM live_rows").first().n

    try:
        produce(kafka, "live", 10, 1, first=10)
        wait_for(lambda: count() == 20, "20 rows")
        # The batch that read offset 19 is committed once the next trigger plans.
        wait_for(lambda: committed(kafka, "live-pipeline") == {("live", 0): 20}, "the commit of offset 20")
        # A partition added to the topic is found at a trigger and read from its start.
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        admin.create_partitions([NewPartitions("live", 2)])["live"].result(30)
        produce(kafka, "live", 6, 2, first=20)
        wait_for(lambda: count() == 26, "26 rows")
        wait_for(lambda: committed(kafka, "live-pipeline") == {("live", 0): 23, ("live", 1): 3},
                 "the commit of the new partition")
    finally:
        query.stop()
    got = sorted((r.partition, r.offset) for r in spark.sql("SELECT * FROM live_rows").collect())
    assert got == [(0, o) for o in range(23)] + [(1, o) for o in range(3)]


@pytest.fixture(scope="module")
def truncated_topic(kafka) -> str:
    """A topic whose first records retention has deleted: its log starts above 0."""
    create_topic(kafka, "lossy", 1, {"retention.bytes": "2048", "segment.bytes": "1024"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    for i in range(60):  # one batch each, so the records fill many small segments
        producer.produce("lossy", b"x" * 100)
        assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        tp = TopicPartition("lossy", 0)
        if admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(30).offset > 0:
            return "lossy"
        assert time.monotonic() < deadline, "retention did not move the log start"
        time.sleep(0.1)


def test_fail_on_data_loss_names_the_partition_and_range(spark, kafka, tmp_path, truncated_topic):
    df = read_stream(spark, kafka, subscribe=truncated_topic, startingOffsets='{"lossy": {"0": 0}}')
    with pytest.raises(Exception, match=r"lossy-0: offsets \[0, \d+\) are no longer available"):
        run_available_now(df, tmp_path / "checkpoint", query_name="lossy_fail")


def test_without_fail_on_data_loss_the_lost_range_is_skipped(spark, kafka, tmp_path, truncated_topic):
    df = read_stream(spark, kafka, subscribe=truncated_topic, startingOffsets='{"lossy": {"0": 0}}',
                     failOnDataLoss="false")
    run_available_now(df, tmp_path / "checkpoint", query_name="lossy_skip")
    offsets = sorted(r.offset for r in spark.sql("SELECT offset FROM lossy_skip").collect())
    assert offsets and offsets[0] > 0
    assert offsets == list(range(offsets[0], 60))


def test_sink_writes_read_back_exactly(spark, kafka):
    create_topic(kafka, "sunk", 2)
    rows = [(f"k{i}", f"v{i}".encode(), i % 2, [("h", b"1")] if i == 3 else []) for i in range(50)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    # The topic option overrides a topic column, as in Spark's connector.
    (df.selectExpr("*", "'not-this-topic' AS topic").write.format("tidemark")
     .option("bootstrap.servers", kafka.bootstrap).option("topic", "sunk").mode("append").save())
    back = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "sunk").option("includeHeaders", "true").load().collect())
    assert sorted((r.key.decode(), r.value, r.partition) for r in back) == sorted(
        (k, v, p) for k, v, p, _ in rows)
    for partition in (0, 1):
        assert sorted(r.offset for r in back if r.partition == partition) == list(range(25))
    assert [(h.key, h.value) for r in back if r.key == b"k3" for h in r.headers] == [("h", b"1")]
    assert "not-this-topic" not in AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10).topics


def test_streaming_sink_with_topic_column(spark, kafka, tmp_path):
    create_topic(kafka, "copy-src", 1)
    produce(kafka, "copy-src", 30, 1)
    df = read_stream(spark, kafka, subscribe="copy-src", startingOffsets="earliest")
    query = (df.selectExpr("key", "value", "'copy-dst' AS topic").writeStream.format("tidemark")
             .option("bootstrap.servers", kafka.bootstrap).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    back = (spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "copy-dst").load().collect())
    assert sorted(r.value for r in back) == sorted(f"v{i}".encode() for i in range(30))


def test_sink_failure_fails_the_job(spark, kafka):
    create_topic(kafka, "small", 1, {"max.message.bytes": "1000"})
    df = spark.createDataFrame([(b"x" * 5000,)], "value binary")
    with pytest.raises(Exception, match="1 of 1 records were not written"):
        (df.write.format("tidemark").option("bootstrap.servers", kafka.bootstrap).option("topic", "small")
         .option("kafka.message.max.bytes", "100000").mode("append").save())
