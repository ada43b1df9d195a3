"""What is pickled to executors holds no client, and every client a task opens is closed when the
task ends: counted on the broker (its `tidemark_connections` gauge) across a 20-batch query."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark import cloudpickle

from tests.conftest import GROUP_SETTINGS, BrokerProcess, free_port
from tests.spark.test_source import QUERY_TIMEOUT_S, committed, create_topic, produce, read_stream

BATCHES = 20
PER_BATCH = 15
# Bounds a wait for closed connections to be counted (not a margin: the waits end on the count).
# Under the 60 s after which Spark ends an idle Python worker, which would close a leaked client.
SETTLE_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def metered() -> Iterator[tuple[BrokerProcess, int]]:
    import tempfile
    from pathlib import Path

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        process = BrokerProcess(Path(tmp) / "data", GROUP_SETTINGS, extra_args=("--metrics-port", str(port))).start()
        yield process, port
        process.kill()


def open_connections(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "tidemark_connections":
            return int(family.samples[0].value)
    raise AssertionError("no tidemark_connections gauge")


def settle_to(port: int, at_most: int) -> int:
    """The broker's open connections once at most `at_most` (a client's close reaches the broker
    a moment after close() returns); the count seen last when the bound runs out."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    count = open_connections(port)
    while count > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
        count = open_connections(port)
    return count


def test_readers_pickle_without_their_client(spark, metered):
    """A reader that has planned (and so holds its driver-side AdminClient) still pickles: the
    client stays behind, and the copy makes its own when it needs one."""
    kafka, _ = metered
    create_topic(kafka, "pickled", 2)
    produce(kafka, "pickled", 10, 2)
    from tidemark.spark.options import parse_source_options
    from tidemark.spark.source import TopicBatchReader, TopicStreamReader

    options = {"bootstrap.servers": kafka.bootstrap, "subscribe": "pickled"}
    batch = TopicBatchReader(parse_source_options(options, streaming=False))
    assert sum(r.end - r.start for r in batch.partitions()) == 10
    stream = TopicStreamReader(parse_source_options({**options, "startingOffsets": "earliest"}, streaming=True))
    stream.initialOffset()
    for reader in (batch, stream):
        copy = cloudpickle.loads(cloudpickle.dumps(reader))  # as Spark ships it
        assert copy.planner._client is None
        assert len(copy.planner.partitions()) == 2
        copy.planner.close()
        reader.planner.close()


def test_a_20_batch_query_leaves_no_connection_open(spark, metered, tmp_path):
    """Source, batch sink and group commits over 20 micro-batches: the broker's count of open
    connections does not grow from batch to batch, and is back where it started after the query."""
    kafka, port = metered
    create_topic(kafka, "leak-in", 3)
    create_topic(kafka, "leak-out", 3)
    produce(kafka, "leak-in", BATCHES * PER_BATCH, 3)
    baseline = settle_to(port, 0)
    seen: list[int] = []

    def each_batch(df, batch_id: int) -> None:
        (df.selectExpr("key", "value").write.format("tidemark")
         .option("bootstrap.servers", kafka.bootstrap).option("topic", "leak-out").mode("append").save())
        # The first batch's count holds the driver's planning client (and whatever task client
        # the broker has not yet seen closed); later batches must come back down to it.
        seen.append(settle_to(port, seen[0] if seen else 1_000_000))
        if seen[-1] > seen[0]:  # stop the query at the first growth rather than after 20 waits
            raise AssertionError(f"open connections grew from batch to batch: {seen}")

    stream = read_stream(spark, kafka, subscribe="leak-in", startingOffsets="earliest", **{
        "group.id": "leak-check", "maxOffsetsPerTrigger": str(PER_BATCH)})
    query = (stream.writeStream.trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "cp"))
             .foreachBatch(each_batch).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish in time"
    assert query.exception() is None, query.exception()
    assert len(seen) == BATCHES
    assert committed(kafka, "leak-check") == {("leak-in", p): BATCHES * PER_BATCH // 3 for p in range(3)}
    out = spark.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap).option("subscribe", "leak-out")
    assert out.load().count() == BATCHES * PER_BATCH
    after = settle_to(port, baseline)
    assert after == baseline, f"{after - baseline} connection(s) left open after the query ({seen})"
