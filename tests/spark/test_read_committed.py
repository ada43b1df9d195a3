"""kafka.isolation.level=read_committed, as Spark's Kafka connector takes it: the driver plans up
to the last stable offset and the tasks' consumer (librdkafka, reading this broker's Fetch
answers) skips aborted transactions."""

from __future__ import annotations

import pyarrow as pa

from tests.integration.raw import RawClient
from tidemark.records import build_batch
from tidemark.spark.cluster import ClusterClient
from tidemark.spark.topic_reader import OffsetRange, read_range
from tidemark.wire.api_keys import ApiKey

NOW = 1_700_000_000_000


def _txn(pid: int, *values: bytes) -> bytes:
    return build_batch([(None, v, (), NOW) for v in values], producer_id=pid, producer_epoch=0, base_sequence=0,
                       is_transactional=True)


def _marker(client: RawClient, topic: str, pid: int, commit: bool) -> None:
    response = client.request(ApiKey.WRITE_TXN_MARKERS, 1, {"markers": [{"producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
                                                   "coordinator_epoch": 0,
                                                   "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    assert response.markers[0].topics[0].partitions[0].error_code == 0


def test_read_committed_plans_to_the_lso_and_skips_aborted_records(broker):
    topic = "read-committed"
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic(topic).error_code == 0
        aborting, committing = client.init_producer_id(), client.init_producer_id()
        assert client.produce(topic, _txn(aborting, b"a0", b"a1")).base_offset == 0
        assert client.produce(topic, build_batch([(None, b"plain", (), NOW)])).base_offset == 2
        assert client.produce(topic, _txn(committing, b"c0")).base_offset == 3
        _marker(client, topic, aborting, False)  # offset 4

        config = {"bootstrap.servers": broker.bootstrap}
        committed = ClusterClient({**config, "isolation.level": "read_committed"})
        assert ClusterClient(config).latest([(topic, 0)]) == {(topic, 0): 5}
        assert committed.latest([(topic, 0)]) == {(topic, 0): 3}  # the committing transaction is open

        _marker(client, topic, committing, True)  # offset 5
        assert committed.latest([(topic, 0)]) == {(topic, 0): 6}

    task = OffsetRange(topic, 0, 0, 6, {**config, "isolation.level": "read_committed"}, True, 30_000)
    rows = pa.Table.from_batches(list(read_range(task))).to_pylist()
    assert [(r["offset"], r["value"]) for r in rows] == [(2, b"plain"), (3, b"c0")]
    # Without the option, as Spark's connector: everything below the high watermark.
    uncommitted = OffsetRange(topic, 0, 0, 6, config, True, 30_000)
    rows = pa.Table.from_batches(list(read_range(uncommitted))).to_pylist()
    assert [r["offset"] for r in rows] == [0, 1, 2, 3]
