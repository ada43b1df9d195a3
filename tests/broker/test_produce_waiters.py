"""A write waiting for replication belongs to the leadership that appended it (Kafka's
DelayedProduce): when this broker stops leading (it follows, the partition is deleted, the
broker stops) the wait ends NOT_LEADER_OR_FOLLOWER, never SUCCESS off another leader's high
watermark, nor off a later leadership of this broker; a new epoch of an unbroken leadership
(the controller's ISR changes bump it) keeps it; a partition takes only leaderships at higher
epochs; a cancelled wait leaves nothing behind."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from tests.broker.test_group_coordinator import _commit as commit_offset
from tests.broker.inprocess import HeldFlusher, running_broker, until
from tests.broker.test_replication import _bytes, _produce, _roles, two_brokers
from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import partition_manager_config
from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.replication.errors import NotLeaderOrFollowerError
from tidemark.replication.partition import Partition
from tidemark.replication.partition_manager import PartitionManager

NOW = 1_700_000_000_000


def _partition(tmp_path, records: int = 0) -> Partition:
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for i in range(records):
        log.append(build_batch([(None, f"v{i}".encode(), (), NOW)]), now_ms=NOW)
    return Partition("t", 0, log, leader_epoch=-1, local_id=1)


def test_acks_all_waiting_on_a_deposed_leader_is_not_leader_even_once_the_new_leaders_high_watermark_passes(
        tmp_path):
    """The reproduction of the issue: the follower stops fetching, the other broker is elected,
    takes another producer's record at the same offset, and the old leader, now its follower,
    learns a high watermark past that offset. The held produce must not be told SUCCESS."""
    async def scenario():
        async with two_brokers(tmp_path, {"request.timeout.ms": "30000"}) as (a, b):
            ap, bp, fetcher = _roles(a, b, epoch=1)
            client_a = await AsyncRawClient.connect(a.port)
            assert await _produce(client_a, b"both") == (ErrorCode.none, 0)
            await fetcher.stop()  # b stops fetching: a's next record is on a alone
            held = asyncio.ensure_future(_produce(client_a, b"only on a"))
            await until(lambda: ap.log.log_end_offset == 2)
            assert not held.done()
            # b is elected at epoch 2 and a follows it.
            bp, ap, fetcher = _roles(b, a, epoch=2)
            client_b = await AsyncRawClient.connect(b.port)
            assert await _produce(client_b, b"another producer") == (ErrorCode.none, 1)
            await until(lambda: ap.high_watermark == 2)  # a's high watermark is past offset 1
            assert _bytes(ap) == _bytes(bp)  # offset 1 holds the other producer's record
            assert await held == (ErrorCode.not_leader_or_follower, 1)
            await client_a.close()
            await client_b.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_leadership_regained_after_following_does_not_answer_the_waits_of_the_earlier_one(tmp_path):
    """As a follower in between, this broker may have truncated what it had appended."""
    async def scenario():
        partition = _partition(tmp_path, 2)
        assert partition.become_leader(1, (1, 2), frozenset({1, 2}), zk_version=0, now_ms=NOW)
        waiting = partition.wait_for_high_watermark(2)
        assert partition.become_follower(2, 2, (1, 2), frozenset({1, 2}), zk_version=1)
        assert partition.become_leader(3, (1, 2), frozenset({1, 2}), zk_version=2, now_ms=NOW)
        partition.follower_fetched(2, 2, NOW)
        assert partition.high_watermark == 2
        with pytest.raises(NotLeaderOrFollowerError):
            await waiting
        assert partition.waiter_count == 0

    asyncio.run(scenario())


def test_a_new_epoch_of_an_unbroken_leadership_keeps_its_waits(tmp_path):
    """The controller bumps the epoch at every ISR change it makes (a follower lost, or shut
    down for a rolling restart): the leader's log is the same, and so are its waits (Kafka's
    DelayedProduce fails only once the broker no longer leads)."""
    async def scenario():
        partition = _partition(tmp_path, 2)
        assert partition.become_leader(1, (1, 2, 3), frozenset({1, 2, 3}), zk_version=0, now_ms=NOW)
        waiting = partition.wait_for_high_watermark(2)
        assert partition.become_leader(2, (1, 2, 3), frozenset({1, 2}), zk_version=1, now_ms=NOW)  # 3 was lost
        partition.follower_fetched(2, 2, NOW)
        await waiting
        assert partition.high_watermark == 2

    asyncio.run(scenario())


def test_a_wait_for_an_epoch_this_broker_does_not_lead_at_fails_at_once(tmp_path):
    async def scenario():
        partition = _partition(tmp_path, 2)
        partition.become_follower(2, 1, (1, 2), frozenset({1, 2}), zk_version=0)
        with pytest.raises(NotLeaderOrFollowerError):
            await partition.wait_for_high_watermark(1)
        partition.become_leader(2, (1, 2), frozenset({1, 2}), zk_version=1, now_ms=NOW)
        with pytest.raises(NotLeaderOrFollowerError):
            await partition.wait_for_high_watermark(1, leader_epoch=1)  # appended under epoch 1

    asyncio.run(scenario())


def test_a_watch_of_the_high_watermark_follows_it_across_leaders(tmp_path):
    """What a standby replays is committed whoever leads: its watch is not tied to an epoch."""
    async def scenario():
        partition = _partition(tmp_path, 3)
        partition.become_follower(2, 1, (1, 2), frozenset({1, 2}), zk_version=0)
        watching = partition.watch_high_watermark(2)
        partition.become_follower(3, 2, (1, 3), frozenset({1, 3}), zk_version=1)
        partition.leader_high_watermark(2)
        await watching

    asyncio.run(scenario())


def test_leadership_only_moves_to_higher_epochs(tmp_path):
    partition = _partition(tmp_path)
    assert partition.become_leader(3, (1, 2), frozenset({1, 2}), zk_version=0, now_ms=NOW)
    # An older view (a stale notice applied late) changes nothing ...
    assert not partition.become_follower(2, 2, (1, 2), frozenset({1, 2}), zk_version=0)
    assert not partition.become_leader(2, (1, 2), frozenset({1, 2}), zk_version=0, now_ms=NOW)
    assert (partition.is_leader, partition.leader_epoch) == (True, 3)
    # ... nor does another leader at the same epoch (an epoch names one leader).
    assert not partition.become_follower(2, 3, (1, 2), frozenset({1, 2}), zk_version=1)
    assert (partition.is_leader, partition.leader_epoch) == (True, 3)
    assert partition.become_follower(2, 4, (1, 2), frozenset({1, 2}), zk_version=2)
    assert (partition.leader_id, partition.leader_epoch) == (2, 4)
    assert not partition.become_leader(4, (1, 2), frozenset({1, 2}), zk_version=2, now_ms=NOW)
    assert not partition.is_leader
    # Losing the leader at the same epoch (the controller found none) is taken.
    assert partition.become_follower(None, 4, (1, 2), frozenset({1}), zk_version=3)
    assert partition.leader_id is None


def test_deletion_and_broker_stop_answer_waiting_writes_not_leader(tmp_path):
    async def scenario():
        replicas = PartitionManager(partition_manager_config(BrokerConfig({})), tmp_path)
        replicas.flusher = HeldFlusher()
        replicas.flusher.holding = True  # nothing becomes durable: every wait stays pending
        replicas.open()
        replicas.start()
        replicas.create_topic("doomed", 1, {})
        replicas.create_topic("kept", 1, {})
        waits = {}
        for name in ("doomed", "kept"):
            partition = replicas.partition(name, 0)
            end = replicas.append(partition, build_batch([(None, b"v", (), NOW)])).last_offset + 1
            waits[name] = partition.wait_for_high_watermark(end)
        replicas.delete_topic("doomed")
        with pytest.raises(NotLeaderOrFollowerError):
            await waits["doomed"]
        assert not waits["kept"].done()
        await replicas.close()
        with pytest.raises(NotLeaderOrFollowerError):
            await waits["kept"]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_commit_waiting_when_the_leadership_changes_is_not_acknowledged_and_the_shard_serves_on(tmp_path):
    """The coordinator's appends are tied to their leadership too: the partition follows, then
    leads again at a later epoch (told to the partition only, as if the coordinator had missed
    the notices), and the high watermark then passes the commit: it is not acknowledged; the
    shard keeps replaying and serves the new leadership."""
    async def scenario():
        async with running_broker(tmp_path, {"offsets.topic.num.partitions": "1"}) as broker:
            broker.replicas.create_topic("t", 1, {})
            coordinator = broker.coordinator
            coordinator.ensure_offsets_topic()
            await until(lambda: all(s.state.value == "active" for s in coordinator.shards.values()))
            flusher: HeldFlusher = broker.replicas.flusher
            flusher.holding = True
            commit = asyncio.ensure_future(commit_offset(coordinator, 7))
            await until(lambda: flusher.held)  # appended, waiting for its fsync
            partition = broker.replicas.partition(OFFSETS_TOPIC, 0)
            node = broker.config.node_id
            partition.become_follower(None, partition.leader_epoch + 1, (node,), frozenset({node}), zk_version=1)
            partition.become_leader(partition.leader_epoch + 1, (node,), frozenset({node}), zk_version=2, now_ms=NOW)
            flusher.release()  # the record becomes durable: the high watermark passes it
            await until(lambda: partition.high_watermark == partition.log.log_end_offset)
            assert await commit == ErrorCode.not_coordinator
            assert await commit_offset(coordinator, 8) == ErrorCode.none

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_lone_leader_whose_log_was_truncated_counts_only_what_was_fsynced_since(tmp_path):
    """The log's recovery point is the one record of what is durable: a truncation lowers it,
    and a leader alone in its ISR acknowledges nothing above it (it used to keep its own
    "flushed end" from before the truncation, and acknowledged appends never fsynced)."""
    async def scenario():
        partition = _partition(tmp_path, 5)
        partition.become_leader(1, (1, 2), frozenset({1}), zk_version=0, now_ms=NOW)
        partition.flushed_to(partition.log.flush())
        assert partition.high_watermark == 5
        # Deposed, it follows a leader whose log diverged at offset 2 and takes its records.
        partition.become_follower(2, 2, (1, 2), frozenset({2}), zk_version=1)
        partition.log.truncate_to(2)
        assert partition.log.recovery_point == 2
        for i in range(3):
            partition.log.append(build_batch([(None, f"new{i}".encode(), (), NOW)]), leader_epoch=2, now_ms=NOW)
        # Elected again, alone in the ISR: offsets 2-4 are in its log but not on its disk.
        partition.become_leader(3, (1, 2), frozenset({1}), zk_version=2, now_ms=NOW)
        committed = partition.wait_for_high_watermark(5)
        assert partition.high_watermark == 2
        partition.flushed_to(partition.log.flush())
        await committed
        assert partition.high_watermark == 5

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_acks_all_produces_that_timed_out_leave_no_waiter_behind(tmp_path):
    """While the high watermark is frozen (fsyncs held), every timed-out acks=all produce takes
    its waiter with it (they used to pile up until the high watermark moved)."""
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.replicas.create_topic("t", 1, {})
            partition = broker.replicas.partition("t", 0)
            broker.replicas.flusher.holding = True
            client = await AsyncRawClient.connect(broker.port)
            for i in range(50):
                assert await _produce(client, b"held", timeout_ms=1) == (ErrorCode.request_timed_out, i)
            await asyncio.sleep(0)  # the last cancellation's callback
            assert partition.waiter_count == 0
            assert partition.high_watermark == 0
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_cancelled_wait_leaves_at_once(tmp_path):
    async def scenario():
        partition = _partition(tmp_path, 3)
        partition.become_leader(1, (1,), frozenset({1}), zk_version=0, now_ms=NOW)
        waits = [partition.wait_for_high_watermark(3) for _ in range(1000)]
        watches = [partition.watch_high_watermark(3) for _ in range(1000)]
        assert partition.waiter_count == 2000
        for future in waits + watches:
            future.cancel()
        await asyncio.sleep(0)
        assert partition.waiter_count == 0

    asyncio.run(scenario())
