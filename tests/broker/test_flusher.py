"""The group-commit flusher: the appends of a leader alone in its ISR are fsynced in the next
round; those of a partition replicated in sync (here a follower's) wait for a round up to
tidemark.replica.flush.interval.ms, unless the partition becomes a leader alone in its ISR."""

from __future__ import annotations

import asyncio
import threading

from tidemark.replication.flusher import Flusher
from tidemark.replication.partition import Partition
from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000
BOUND_S = 30  # bounds each wait; nothing here depends on how fast a round runs


def _partition(tmp_path, name: str, records: int) -> Partition:
    log = UnifiedLog.open(tmp_path / f"{name}-0", LogConfig(), now_ms=NOW)
    for i in range(records):
        log.append(build_batch([(None, f"v{i}".encode(), (), NOW)]), now_ms=NOW)
    return Partition(name, 0, log, local_id=1)


async def _flushed(partition: Partition, end: int) -> None:
    while partition.log.local.recovery_point < end:
        await asyncio.sleep(0.001)


def test_a_followers_appends_wait_for_the_replica_round_and_a_lone_new_leaders_do_not(tmp_path):
    asyncio.run(_waits_for_the_replica_round(tmp_path))


def test_a_followers_appends_are_flushed_by_the_replica_round(tmp_path):
    asyncio.run(_flushed_by_the_replica_round(tmp_path))


async def _waits_for_the_replica_round(tmp_path) -> None:
    flusher = Flusher(replica_flush_interval_ms=HOUR_MS)
    flusher.start()
    leader, follower = _partition(tmp_path, "led", 3), _partition(tmp_path, "followed", 3)
    try:
        flusher.mark_replicated(follower)
        flusher.mark_dirty(leader)
        await asyncio.wait_for(_flushed(leader, 3), BOUND_S)
        # The round that flushed the leader's appends left the follower's for its own round.
        assert follower.log.local.recovery_point == 0
        flusher.mark_dirty(follower)  # it became leader, alone in the ISR: its end counts once durable
        await asyncio.wait_for(_flushed(follower, 3), BOUND_S)
        assert follower.log.recovery_point == 3
    finally:
        await flusher.stop()
        leader.log.close()
        follower.log.close()


async def _flushed_by_the_replica_round(tmp_path) -> None:
    flusher = Flusher(replica_flush_interval_ms=1)
    flusher.start()
    follower = _partition(tmp_path, "followed", 2)
    try:
        flusher.mark_replicated(follower)
        await asyncio.wait_for(_flushed(follower, 2), BOUND_S)
    finally:
        await flusher.stop()
        follower.log.close()


def test_a_round_syncs_its_logs_side_by_side(tmp_path):
    """Two leaders' appends in one round: their logs are fsynced at the same time (each flush
    here returns only once the other has started), and both become durable."""
    asyncio.run(_side_by_side(tmp_path))


async def _side_by_side(tmp_path) -> None:
    flusher = Flusher(flush_threads=2)
    flusher.start()
    first, second = _partition(tmp_path, "first", 2), _partition(tmp_path, "second", 3)
    both_syncing = threading.Barrier(2, timeout=BOUND_S)  # broken (the flush fails) if one waits alone
    originals = [partition.log.local.before_sync for partition in (first, second)]
    for partition, metadata in zip((first, second), originals):
        def synced_together(metadata=metadata) -> None:
            both_syncing.wait()
            metadata()
        partition.log.local.before_sync = synced_together
    try:
        flusher.mark_dirty(first)
        flusher.mark_dirty(second)
        await asyncio.wait_for(asyncio.gather(_flushed(first, 2), _flushed(second, 3)), BOUND_S * 2)
        assert (first.log.recovery_point, second.log.recovery_point) == (2, 3)
    finally:
        await flusher.stop()
        for partition, metadata in zip((first, second), originals):
            partition.log.local.before_sync = metadata  # close() flushes each alone
            partition.log.close()


def test_rounds_run_while_the_event_loop_is_busy(tmp_path):
    """The disk thread runs a round as soon as a partition is marked dirty, and the next one
    as soon as that ends, without waiting for the event loop's turn: here the loop is held the
    whole time, and two appends made in turn are both fsynced."""
    asyncio.run(_rounds_without_the_loop(tmp_path))


async def _rounds_without_the_loop(tmp_path) -> None:
    flusher = Flusher()
    flusher.start()
    partition = _partition(tmp_path, "busy", 1)
    synced = threading.Semaphore(0)
    original = partition.log.local.before_sync

    def counted() -> None:
        original()
        synced.release()
    partition.log.local.before_sync = counted
    try:
        await asyncio.sleep(0)
        flusher.mark_dirty(partition)  # the loop is held from here on: no await until both rounds ran
        assert synced.acquire(timeout=BOUND_S), "no round ran while the event loop was busy"
        partition.log.append(build_batch([(None, b"second", (), NOW)]), now_ms=NOW)
        flusher.mark_dirty(partition)
        assert synced.acquire(timeout=BOUND_S), "the next round waited for the event loop"
        deadline = asyncio.get_running_loop().time() + BOUND_S
        while partition.log.local.recovery_point < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.001)  # the flush writes the recovery point after its fsync
        assert partition.log.local.recovery_point == 2
    finally:
        await flusher.stop()
        partition.log.local.before_sync = original
        partition.log.close()


def test_a_flusher_started_again_after_stop_runs_rounds_on_one_thread(tmp_path):
    """Stop then start (a broker restarted in the same process): the new start's thread runs the
    rounds and the stopped one's does not come back."""
    async def scenario() -> None:
        flusher = Flusher()
        flusher.start()
        first_thread = flusher._thread
        await flusher.stop()
        flusher.start()
        partition = _partition(tmp_path, "again", 2)
        try:
            flusher.mark_dirty(partition)
            await asyncio.wait_for(_flushed(partition, 2), BOUND_S)
            first_thread.join(BOUND_S)
            assert not first_thread.is_alive()
        finally:
            await flusher.stop()
            partition.log.close()

    asyncio.run(scenario())
