"""The leader's view of its followers (Kafka's Partition): the high watermark is the smallest
log end over the ISR (the leader's own once fsynced while it is alone in it), followers leave
the ISR after replica.lag.time.max.ms without catching up and rejoin once caught up to the high
watermark and the leader's epoch start."""

from __future__ import annotations

import asyncio

from tidemark.replication.partition import Partition
from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000
LAG_MS = 30_000


def _partition(tmp_path, records: int = 0) -> Partition:
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    for i in range(records):
        log.append(build_batch([(None, f"v{i}".encode(), (), NOW)]), now_ms=NOW)
    return Partition("t", 0, log, local_id=1)


def _fsync(partition: Partition) -> None:
    """What the flusher does: fsync the log (its recovery point moves to its end) and say so."""
    partition.flushed_to(partition.log.flush())


def _lead(partition: Partition, isr=(1, 2, 3)) -> None:
    partition.become_leader(1, (1, 2, 3), frozenset(isr), zk_version=0, now_ms=NOW)


def test_one_replica_alone_is_committed_once_durable(tmp_path):
    partition = _partition(tmp_path, 3)
    _fsync(partition)
    assert partition.high_watermark == 3


def test_the_high_watermark_is_the_smallest_log_end_in_the_isr(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition)
    _fsync(partition)
    assert partition.high_watermark == 0  # the followers have nothing yet
    partition.follower_fetched(2, 5, NOW)
    assert partition.high_watermark == 0
    partition.follower_fetched(3, 4, NOW)
    assert partition.high_watermark == 4
    partition.follower_fetched(3, 5, NOW)
    assert partition.high_watermark == 5


def test_a_follower_outside_the_isr_does_not_hold_the_high_watermark(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2))
    _fsync(partition)
    partition.follower_fetched(2, 5, NOW)
    assert partition.high_watermark == 5  # replica 3 is out of sync: not waited for


def test_the_leaders_own_end_counts_once_appended_with_a_follower_in_sync_and_once_fsynced_alone(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2))
    partition.follower_fetched(2, 5, NOW)
    assert partition.high_watermark == 5  # on two replicas: committed, fsynced or not
    partition.log.append(build_batch([(None, b"late", (), NOW)]), now_ms=NOW)
    partition.update_isr(frozenset({1}), zk_version=1)  # the follower dropped out before fetching it
    assert partition.high_watermark == 5  # on one replica and not on disk: not committed
    _fsync(partition)
    assert partition.high_watermark == 6


def test_a_follower_not_caught_up_for_the_lag_time_leaves_the_isr(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition)
    partition.follower_fetched(2, 5, NOW + 1000)  # caught up
    partition.follower_fetched(3, 2, NOW + 1000)  # behind
    assert partition.isr_to_shrink(NOW + LAG_MS, LAG_MS) is None  # exactly the lag time: still in
    assert partition.isr_to_shrink(NOW + LAG_MS + 1, LAG_MS) == frozenset({1, 2})
    # Fetching from where the leader's log ended at its previous fetch counts as caught up then.
    partition.follower_fetched(3, 5, NOW + LAG_MS)
    assert partition.isr_to_shrink(NOW + LAG_MS + 1, LAG_MS) is None


def test_a_follower_rejoins_once_caught_up_to_the_high_watermark_and_the_epoch_start(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2))  # the epoch starts at offset 5
    _fsync(partition)
    partition.follower_fetched(2, 5, NOW)
    partition.follower_fetched(3, 4, NOW)
    assert partition.isr_to_expand() is None
    partition.follower_fetched(3, 5, NOW)
    assert partition.isr_to_expand() == frozenset({1, 2, 3})
    partition.update_isr(frozenset({1, 2, 3}), zk_version=1)
    assert (partition.isr, partition.zk_version) == (frozenset({1, 2, 3}), 1)


def test_a_follower_that_never_fetches_does_not_rejoin_an_empty_partition(tmp_path):
    """A dead follower of an empty partition (high watermark 0, epoch start 0): its log end is
    unknown, not 0, so it is not "caught up" and stays out of the ISR (it used to rejoin after
    every shrink, and acks=all writes waited for a broker that was down)."""
    partition = _partition(tmp_path)
    _lead(partition, isr=(1, 3))
    partition.follower_fetched(3, 0, NOW)
    assert partition.isr_to_expand() is None
    partition.follower_fetched(2, 0, NOW)  # the first fetch of the restarted follower
    assert partition.isr_to_expand() == frozenset({1, 2, 3})


def test_a_follower_that_stopped_fetching_does_not_rejoin_after_leaving_the_isr(tmp_path):
    partition = _partition(tmp_path)  # empty: its last fetch offset (0) is the high watermark
    _lead(partition)
    _fsync(partition)
    partition.follower_fetched(2, 0, NOW)
    partition.follower_fetched(3, 0, NOW)
    partition.update_isr(frozenset({1, 2}), zk_version=1)  # 3 was lost (the controller took it out)
    assert partition.isr_to_expand() is None
    partition.follower_fetched(3, 0, NOW + 1)  # back and fetching
    assert partition.isr_to_expand() == frozenset({1, 2, 3})


def test_a_follower_takes_the_leaders_high_watermark_up_to_its_own_log_end(tmp_path):
    partition = _partition(tmp_path, 3)
    partition.become_follower(2, 1, (1, 2, 3), frozenset({1, 2, 3}), zk_version=0)
    partition.leader_high_watermark(10)
    assert partition.high_watermark == 3
    _fsync(partition)  # its own fsync never moves a follower's high watermark past the leader's
    assert partition.high_watermark == 3 and not partition.is_leader


def test_acks_all_waiters_are_released_when_the_last_isr_member_has_the_records(tmp_path):
    async def scenario():
        partition = _partition(tmp_path, 4)
        _lead(partition, isr=(1, 2))
        committed = partition.wait_for_high_watermark(4)
        _fsync(partition)
        await asyncio.sleep(0)
        assert not committed.done()
        partition.follower_fetched(2, 4, NOW)
        assert committed.done()

    asyncio.run(scenario())


def test_a_replica_the_leader_asks_to_add_counts_for_the_high_watermark_at_once(tmp_path):
    """KIP-497's maximal ISR: once the leader asks ZooKeeper to add a replica, ZooKeeper may list
    it (and the controller elect it) before the answer comes, so the leader commits nothing that
    replica lacks, whatever becomes of the write, until it learns the ISR as stored."""
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2))  # the epoch starts at offset 5
    partition.follower_fetched(2, 5, NOW)
    partition.follower_fetched(3, 5, NOW)
    wanted = partition.isr_to_expand()
    assert wanted == frozenset({1, 2, 3})
    partition.isr_write_pending(wanted)
    assert partition.maximal_isr == frozenset({1, 2, 3})
    for i in range(3):
        partition.log.append(build_batch([(None, f"w{i}".encode(), (), NOW)]), now_ms=NOW)
    partition.follower_fetched(2, 8, NOW)
    assert partition.high_watermark == 5  # replica 3, being added, has none of them
    partition.follower_fetched(3, 7, NOW)
    assert partition.high_watermark == 7
    assert partition.isr_unconfirmed == frozenset({1, 2, 3})  # the ISR loop asks again until learned
    partition.update_isr(frozenset({1, 2}), zk_version=1)  # the write lost: the stored ISR is learned
    assert partition.maximal_isr == frozenset({1, 2}) and partition.isr_unconfirmed is None
    assert partition.high_watermark == 8


def test_a_replica_the_leader_asks_to_remove_counts_until_the_write_is_confirmed(tmp_path):
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2, 3))
    partition.follower_fetched(2, 5, NOW)
    partition.follower_fetched(3, 2, NOW)
    assert partition.high_watermark == 2
    partition.isr_write_pending(frozenset({1, 2}))
    partition.follower_fetched(2, 5, NOW + 1)
    assert partition.high_watermark == 2  # replica 3 may still be listed: still waited for
    partition.update_isr(frozenset({1, 2}), zk_version=1)
    assert partition.high_watermark == 5


def test_a_refused_isr_write_keeps_counting_the_replica_until_a_new_role(tmp_path):
    """A refused or failed write may still have been stored: the pending replicas count until
    the leader learns the state (here a new leadership epoch from the controller)."""
    partition = _partition(tmp_path, 5)
    _lead(partition, isr=(1, 2))
    partition.follower_fetched(2, 5, NOW)
    partition.follower_fetched(3, 5, NOW)
    partition.isr_write_pending(frozenset({1, 2, 3}))
    partition.log.append(build_batch([(None, b"w", (), NOW)]), now_ms=NOW)
    partition.follower_fetched(2, 6, NOW)
    assert partition.high_watermark == 5
    partition.become_leader(2, (1, 2, 3), frozenset({1, 2}), zk_version=1, now_ms=NOW)
    assert partition.maximal_isr == frozenset({1, 2})
