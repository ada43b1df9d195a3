"""One partition's failure stays that partition's (Kafka's failedPartitions): a follower whose log
fails on one partition, at its truncation or at an append, stops fetching that partition only,
logs it once and counts it; every other partition from the same leader keeps replicating, over
the same connection, and acks=all on them is answered. The failed one is fetched again once it
is added again (its next leadership)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import REGISTRY

from tests.broker.inprocess import until
from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch
from tidemark.records.errors import CorruptRecordError
from tidemark.replication.replica_fetcher import ReplicaFetcher

NOW = 1_700_000_000_000
LEADER, FOLLOWER = 2, 1
PRODUCE = 0


@contextlib.asynccontextmanager
async def two_partitions(tmp_path):
    """Broker 2 leading t-0 and t-1 at epoch 1, broker 1 following both (ISR: both brokers)."""
    brokers = {i: Broker(BrokerConfig({"node.id": str(i)}), tmp_path / f"b{i}", port=0) for i in (FOLLOWER, LEADER)}
    for broker in brokers.values():
        await broker.start()
        broker.replicas.create_topic("t", 2, {})
    try:
        replicas, isr = (LEADER, FOLLOWER), frozenset({LEADER, FOLLOWER})
        for index in (0, 1):
            brokers[LEADER].replicas.partition("t", index).become_leader(1, replicas, isr, zk_version=0, now_ms=NOW)
            brokers[FOLLOWER].replicas.partition("t", index).become_follower(LEADER, 1, replicas, isr, zk_version=0)
        yield brokers[LEADER], brokers[FOLLOWER]
    finally:
        for broker in brokers.values():
            await broker.stop()


class CountingFetcher(ReplicaFetcher):
    connections = 0

    async def _connect(self):
        self.connections += 1
        return await super()._connect()


async def _produce(client: AsyncRawClient, partition: int, value: bytes, acks: int) -> tuple[int, int]:
    response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": acks, "timeout": 30_000,
                                                 "topic_data": [{"name": "t", "partition_data": [
                                                     {"index": partition,
                                                      "records": build_batch([(None, value, (), NOW)])}]}]})
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def _failed_gauge() -> float:
    return REGISTRY.get_sample_value("tidemark_replica_failed_partitions")


@pytest.mark.parametrize("stage", ["truncate", "append"])
def test_a_partition_whose_log_fails_stops_alone_and_the_others_replicate(tmp_path, stage):
    async def scenario():
        async with two_partitions(tmp_path) as (leader, follower):
            healthy, bad = follower.replicas.partition("t", 0), follower.replicas.partition("t", 1)
            client = await AsyncRawClient.connect(leader.port)
            assert await _produce(client, 1, b"for the bad one", acks=1) == (ErrorCode.none, 0)
            disk_error = OSError(5, "Input/output error")
            if stage == "truncate":
                bad.log.local.offline = disk_error  # offline before the fetcher truncates it
            failing = stage == "append"

            def append(partition, records):
                if partition is bad and failing:
                    bad.log.local.offline = disk_error  # the disk fails under the append
                return follower.replicas.append_as_follower(partition, records)

            fetcher = CountingFetcher(FOLLOWER, LEADER, lambda: ("127.0.0.1", leader.port), append=append,
                                      sync_truncations=follower.replicas.sync_truncations, max_wait_ms=100)
            before = _failed_gauge()
            fetcher.add(bad)  # first: its answer comes before the healthy one's
            fetcher.add(healthy)
            fetcher.start()
            for i in range(3):
                assert await _produce(client, 0, b"v%d" % i, acks=-1) == (ErrorCode.none, i)
            assert healthy.log.log_end_offset == 3
            assert fetcher.failed == {("t", 1)}
            assert ("t", 1) not in fetcher.partitions
            assert _failed_gauge() == before + 1
            assert bad.log.log_end_offset == 0
            assert fetcher.connections == 1  # the fetch was never aborted and retried as a whole

            # Repaired, and followed again (a new leadership adds it): it replicates.
            bad.log.local.offline = None
            failing = False
            fetcher.add(bad)
            assert fetcher.failed == set() and _failed_gauge() == before
            await until(lambda: bad.log.log_end_offset == 1)
            assert fetcher.connections == 1
            await client.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=90))


def test_a_corrupt_batch_delays_its_partition_and_is_fetched_again(tmp_path):
    """As in Kafka, a batch that fails its check (maybe a torn read) is no reason to give the
    partition up: it is fetched again after the back-off, and replicates."""
    async def scenario():
        async with two_partitions(tmp_path) as (leader, follower):
            partition = follower.replicas.partition("t", 0)
            client = await AsyncRawClient.connect(leader.port)
            assert await _produce(client, 0, b"v0", acks=1) == (ErrorCode.none, 0)
            corrupt = [CorruptRecordError("CRC mismatch")]

            def append(p, records):
                if corrupt:
                    raise corrupt.pop()
                return follower.replicas.append_as_follower(p, records)

            fetcher = CountingFetcher(FOLLOWER, LEADER, lambda: ("127.0.0.1", leader.port), append=append,
                                      sync_truncations=follower.replicas.sync_truncations,
                                      max_wait_ms=100, backoff_ms=10)
            fetcher.add(partition)
            fetcher.start()
            assert await _produce(client, 0, b"v1", acks=-1) == (ErrorCode.none, 1)
            assert partition.log.log_end_offset == 2 and not corrupt
            assert fetcher.failed == set() and fetcher.connections == 1
            await client.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=90))
