"""Replication between two real brokers in this process, their roles given by hand (the cluster
layer gives them from ZooKeeper): the follower's fetcher copies the leader's batches byte for
byte, acks=all waits for every in-sync replica, a follower out of the ISR is not waited for, and
a follower with divergent history is truncated to the leader's epoch boundary."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import until
from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.replication.replica_fetcher import ReplicaFetcher
from tidemark.broker.server import Broker
from tidemark.records import build_batch, iter_batches
from tidemark.wire.api_keys import ApiKey

NOW = 1_700_000_000_000
PRODUCE = 0


@contextlib.asynccontextmanager
async def two_brokers(tmp_path, settings: dict[str, str] | None = None):
    brokers = [Broker(BrokerConfig({"node.id": str(i), **(settings or {})}), tmp_path / f"b{i}", port=0)
               for i in (1, 2)]
    for broker in brokers:
        await broker.start()
        broker.replicas.create_topic("t", 1, {})
    try:
        yield brokers
    finally:
        for broker in brokers:
            await broker.stop()


def _roles(leader: Broker, follower: Broker, epoch: int, isr=(1, 2)):
    """Partition t-0 led by `leader` at `epoch`, followed by `follower`."""
    lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
    lead_id, follow_id = leader.config.node_id, follower.config.node_id
    replicas = (lead_id, follow_id)
    lp.become_leader(epoch, replicas, frozenset(isr), zk_version=0, now_ms=NOW)
    fp.become_follower(lead_id, epoch, replicas, frozenset(isr), zk_version=0)
    fetcher = ReplicaFetcher(follow_id, lead_id, lambda: ("127.0.0.1", leader.port),
                             append=follower.replicas.append_as_follower,
                             sync_truncations=follower.replicas.sync_truncations, max_wait_ms=100)
    fetcher.add(fp)
    fetcher.start()
    return lp, fp, fetcher


async def _produce(client: AsyncRawClient, value: bytes, acks: int = -1, timeout_ms: int = 30_000,
                   topic: str = "t", partition: int = 0):
    response = await client.request(PRODUCE, 9, {"transactional_id": None, "acks": acks, "timeout": timeout_ms,
                                                 "topic_data": [{"name": topic, "partition_data": [
                                                     {"index": partition,
                                                      "records": build_batch([(None, value, (), NOW)])}]}]})
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def _bytes(partition) -> bytes:
    """The whole log's batches (a read returns one segment's at most)."""
    data, position, end = b"", 0, partition.log.log_end_offset
    while position < end:
        chunk = bytes(partition.log.read(position, 1 << 30, upper_bound=end))
        last = list(iter_batches(chunk, validate=False))[-1][1]
        data, position = data + chunk, last.last_offset + 1
    return data


def test_acks_all_is_answered_once_the_follower_has_the_records_and_the_logs_are_identical(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path) as (leader, follower):
            lp, fp, fetcher = _roles(leader, follower, epoch=1)
            client = await AsyncRawClient.connect(leader.port)
            for i in range(5):
                assert await _produce(client, f"v{i}".encode()) == (ErrorCode.none, i)
                # acknowledged: the follower fetched past it, so its log has it
                assert fp.log.log_end_offset >= i + 1
            await until(lambda: fp.high_watermark == 5)
            assert _bytes(lp) == _bytes(fp)  # offsets, epochs, CRCs: the same batches
            assert fp.log.end_offset_for_epoch(1) == (1, 5)
            await client.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_acks_all_waits_for_every_isr_member_and_not_for_one_outside_it(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path, {"request.timeout.ms": "30000"}) as (leader, follower):
            lp, fp, fetcher = _roles(leader, follower, epoch=1)
            client = await AsyncRawClient.connect(leader.port)
            assert await _produce(client, b"first") == (ErrorCode.none, 0)
            await fetcher.stop()  # the follower stops fetching
            held = asyncio.ensure_future(_produce(client, b"second"))
            await until(lambda: lp.log.recovery_point == 2)  # durable on the leader ...
            assert not held.done()  # ... but not on the follower, still in the ISR
            lp.update_isr(frozenset({1}), zk_version=1)  # the follower leaves the ISR
            assert await held == (ErrorCode.none, 1)
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_min_insync_replicas_refuses_before_and_after_the_append(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path, {"min.insync.replicas": "2"}) as (leader, follower):
            lp, fp, fetcher = _roles(leader, follower, epoch=1)
            client = await AsyncRawClient.connect(leader.port)
            assert await _produce(client, b"two replicas") == (ErrorCode.none, 0)
            await fetcher.stop()
            held = asyncio.ensure_future(_produce(client, b"then one"))
            await until(lambda: lp.log.recovery_point == 2)
            lp.update_isr(frozenset({1}), zk_version=1)
            assert (await held)[0] == ErrorCode.not_enough_replicas_after_append
            assert (await _produce(client, b"alone"))[0] == ErrorCode.not_enough_replicas
            assert lp.log.log_end_offset == 2  # refused before the append: nothing written
            assert (await _produce(client, b"acks=1", acks=1))[0] == ErrorCode.none
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_follower_with_divergent_history_is_truncated_to_the_new_leaders_epoch_boundary(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path) as (a, b):
            ap, bp, fetcher = _roles(a, b, epoch=1)
            client = await AsyncRawClient.connect(a.port)
            for i in range(3):
                assert await _produce(client, f"common{i}".encode()) == (ErrorCode.none, i)
            await fetcher.stop()
            # a, still leader at epoch 1, appends two records nobody fetched (never acknowledged) ...
            for i in range(2):
                assert (await _produce(client, f"lost{i}".encode(), acks=1))[0] == ErrorCode.none
            await client.close()
            assert ap.log.log_end_offset == 5
            # ... then b becomes leader at epoch 2 and takes new writes; a follows it.
            bp, ap, fetcher = _roles(b, a, epoch=2)
            client = await AsyncRawClient.connect(b.port)
            assert await _produce(client, b"new leader") == (ErrorCode.none, 3)
            await until(lambda: ap.log.log_end_offset == 4)
            assert _bytes(ap) == _bytes(bp)  # offsets 3 and 4 of epoch 1 are gone from a
            await client.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_forged_replica_id_gets_not_leader_or_follower(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path) as (leader, _):
            client = await AsyncRawClient.connect(leader.port)
            assert await _produce(client, b"x") == (ErrorCode.none, 0)
            response = await client.request(ApiKey.FETCH, 12, {
                "replica_id": 7, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
                "session_id": 0, "session_epoch": -1, "topics": [{"topic": "t", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": [], "rack_id": ""})
            assert response.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
