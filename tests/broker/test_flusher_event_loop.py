"""Disk work the event loop never waits for: a follower's truncation is made durable, the log
start checkpoint of DeleteRecords and the producer snapshot of a roll are written, each in a
disk thread. Each test holds that disk operation where it happens and, from there, has the
event loop append to another partition: done while the operation is held, the loop was free
(on the loop itself it could not be, and the test sees so at once)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.broker.test_follower_truncation import (
    FOLLOWER,
    _diverged_at_epoch_3,
    _fetcher,
    _records,
    _write,
    leader_and_follower,
)
from tests.integration.raw import AsyncRawClient
from tidemark.log import manager, producer_state
from tidemark.log.manager import LOG_START_OFFSET_CHECKPOINT
from tidemark.records import build_batch

NOW = 1_700_000_000_000
GUARD_S = 30  # a hang guard only: a free event loop serves the probe at once
DELETE_RECORDS = 21


class LoopProbe:
    """Called from where a disk operation is held: has the event loop run `probe` meanwhile
    (`served`: True), or, called on the event loop itself, notes that it could not (False)."""

    def __init__(self, probe: Callable[[], Awaitable[None]]) -> None:
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.probe = probe
        self.served: list[bool] = []

    def __call__(self) -> None:
        if threading.get_ident() == self.loop_thread:
            self.served.append(False)  # the event loop itself waits on the disk
            return
        asyncio.run_coroutine_threadsafe(self.probe(), self.loop).result(timeout=GUARD_S)
        self.served.append(True)


def _value(i: int) -> bytes:
    return build_batch([(None, b"v%d" % i, (), NOW)])


def test_a_followers_truncation_is_made_durable_off_the_event_loop_and_fetched_past_only_then(
        tmp_path, monkeypatch):
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            lp, fp = _diverged_at_epoch_3(leader, follower)
            _write(lp, [(3, 1)], "leader")
            follower.replicas.create_topic("u", 1, {})
            other = follower.replicas.partition("u", 0)
            fetcher = _fetcher(leader, follower)
            seen = []

            async def probe():
                follower.replicas.append(other, _value(0))  # another partition's append is served
                seen.append((fp.log.log_end_offset, ("t", 0) in fetcher._truncating))

            held = LoopProbe(probe)
            directory, real = str(fp.log.directory), os.fsync

            def fsync(fd):
                if not held.served and os.readlink(f"/proc/self/fd/{fd}").startswith(directory):
                    held()  # the first fsync of the truncated log
                real(fd)

            monkeypatch.setattr(os, "fsync", fsync)
            fetcher.add(fp)
            fetcher.start()
            await until(lambda: lp.followers[FOLLOWER].log_end_offset == 6)
            assert held.served == [True]
            # Cut to 2 (the end of its epoch 0) and still truncating: nothing fetched before durable.
            assert seen == [(2, True)]
            assert other.log.log_end_offset == 1
            assert _records(fp) == _records(lp)
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_delete_records_answers_once_its_checkpoint_is_written_off_the_event_loop(tmp_path, monkeypatch):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.replicas.create_topic("t", 1, {})
            broker.replicas.create_topic("u", 1, {})
            partition, other = broker.replicas.partition("t", 0), broker.replicas.partition("u", 0)
            for i in range(3):
                broker.replicas.append(partition, _value(i))
            await until(lambda: partition.high_watermark == 3)

            async def probe():
                broker.replicas.append(other, _value(0))

            held = LoopProbe(probe)
            real = manager.write_checkpoint

            def write_checkpoint(path, entries):
                if path.name == LOG_START_OFFSET_CHECKPOINT and entries.get(("t", 0)) == 2 and not held.served:
                    held()
                real(path, entries)

            monkeypatch.setattr(manager, "write_checkpoint", write_checkpoint)
            client = await AsyncRawClient.connect(broker.port)
            response = await client.request(DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "offset": 2}]}], "timeout": 30_000})
            answer = response.topics[0].partitions[0]
            assert (answer.error_code, answer.low_watermark) == (ErrorCode.none, 2)
            assert held.served == [True]
            assert other.log.log_end_offset == 1
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_the_producer_snapshot_of_a_roll_is_written_off_the_event_loop(tmp_path, monkeypatch):
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.replicas.create_topic("t", 1, {"segment.bytes": 200})  # a roll at each append
            broker.replicas.create_topic("u", 1, {})
            partition, other = broker.replicas.partition("t", 0), broker.replicas.partition("u", 0)

            async def probe():
                broker.replicas.append(other, _value(0))

            held = LoopProbe(probe)
            real = producer_state.write_snapshot

            def write_snapshot(path, entries, **kwargs):
                if not held.served:
                    held()
                real(path, entries, **kwargs)

            monkeypatch.setattr(producer_state, "write_snapshot", write_snapshot)
            for i in range(2):
                broker.replicas.append(partition, build_batch([(None, b"x" * 100, (), NOW)]))
            await until(lambda: partition.high_watermark == 2)
            assert held.served == [True]
            assert (partition.log.directory / f"{1:020d}.snapshot").exists()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_truncation_is_durable_for_the_fetcher_once_its_lowered_recovery_point_is_checkpointed(
        tmp_path, monkeypatch):
    """What the fetcher awaits covers the LogManager's checkpoint of the lowered recovery point
    too (on its own disk thread): a segment rolled after the truncation then finds that write
    done, instead of waiting for it on the event loop."""
    async def scenario():
        async with running_broker(tmp_path) as broker:
            broker.replicas.create_topic("t", 1, {})
            partition = broker.replicas.partition("t", 0)
            for i in range(5):
                broker.replicas.append(partition, _value(i))
            await until(lambda: partition.high_watermark == 5)
            entered, release = threading.Event(), threading.Event()
            real = manager.write_checkpoint

            def write_checkpoint(path, entries):
                if path.name == manager.RECOVERY_POINT_CHECKPOINT and entries.get(("t", 0)) == 2:
                    entered.set()
                    release.wait(GUARD_S)
                real(path, entries)

            monkeypatch.setattr(manager, "write_checkpoint", write_checkpoint)
            partition.log.truncate_to(2)
            synced = asyncio.get_running_loop().create_task(broker.replicas.sync_truncations([partition]))
            await until(entered.is_set)
            assert not synced.done()  # it waits for the held checkpoint, the event loop does not
            release.set()
            assert await synced == [None]
            assert (tmp_path / manager.RECOVERY_POINT_CHECKPOINT).read_text().splitlines()[2] == "t 0 2"

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
