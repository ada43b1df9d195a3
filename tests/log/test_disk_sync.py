"""What a log keeps besides its segments (the leader epoch checkpoint, the producer snapshot of
a roll) costs the event loop no fsync: the log's flush, in the flusher's thread, writes and
fsyncs the checkpoint and fsyncs the snapshots before its recovery point passes the batches
they describe; a crash before that leaves batches whose epochs the checkpoint lacks, and
loading takes them from those batches."""

from __future__ import annotations

import os
import threading

import pytest

from tidemark.log import producer_state
from tidemark.log.config import LogConfig
from tidemark.log.leader_epoch import LEADER_EPOCH_CHECKPOINT, EpochEntry
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000


@pytest.fixture
def fsyncs(monkeypatch):
    """(thread name, path) of every os.fsync from here on."""
    seen: list[tuple[str, str]] = []
    real = os.fsync

    def recording(fd):
        seen.append((threading.current_thread().name, os.readlink(f"/proc/self/fd/{fd}")))
        return real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def _append(log: UnifiedLog, epoch: int, count: int) -> None:
    for _ in range(count):
        log.append(build_batch([(None, b"x" * 100, (), NOW)]), leader_epoch=epoch, now_ms=NOW)


def test_a_new_epoch_and_a_roll_fsync_nothing_until_the_log_is_flushed_in_another_thread(tmp_path, fsyncs):
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)  # one batch a segment
    try:
        fsyncs.clear()
        log.assign_epoch_start_offset(1)  # what become_leader does, on the event loop
        _append(log, 1, 3)  # two rolls: two producer snapshots
        log.truncate_to(2)
        _in_thread(log.sync_truncation)  # what the fetcher awaits before it appends again
        assert {thread for thread, _ in fsyncs} == {"disk"}
        log.assign_epoch_start_offset(2)  # led again
        _append(log, 2, 1)
        fsyncs.clear()
        flusher = threading.Thread(target=log.flush, name="disk")
        flusher.start()
        flusher.join()
        assert {thread for thread, _ in fsyncs} == {"disk"}
        synced = [path for _, path in fsyncs]
        checkpoint = str(log.directory / LEADER_EPOCH_CHECKPOINT) + ".tmp"  # fsynced, then renamed
        assert checkpoint in synced
        assert synced.index(checkpoint) < min(i for i, p in enumerate(synced) if p.endswith(".log"))
        assert any(path.endswith(".snapshot") for path in synced)
        assert log.recovery_point == 3
    finally:
        log.close()


def _in_thread(action) -> None:
    thread = threading.Thread(target=action, name="disk")
    thread.start()
    thread.join()


def test_a_truncation_fsyncs_nothing_on_its_own_thread_and_is_durable_once_synced(tmp_path, fsyncs):
    """The fetcher truncates on the event loop and awaits sync_truncation in the disk thread:
    the cut length, the directory without the deleted segments and the epochs cut reach the
    disk there, and the recovery point stays where the truncation lowered it."""
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)
    try:
        log.assign_epoch_start_offset(1)
        _append(log, 1, 2)
        log.assign_epoch_start_offset(2)
        _append(log, 2, 3)
        log.flush()
        fsyncs.clear()
        log.truncate_to(2)
        assert fsyncs == []  # nothing on the caller's thread
        assert log.recovery_point == log.log_end_offset == 2
        _in_thread(log.sync_truncation)
        synced = [path for _, path in fsyncs]
        assert {thread for thread, _ in fsyncs} == {"disk"}
        assert str(log.segments[-1].log_path) in synced and str(log.directory) in synced
        assert synced.index(str(log.directory)) < synced.index(str(log.directory / LEADER_EPOCH_CHECKPOINT) + ".tmp")
        assert log.recovery_point == 2
        fsyncs.clear()
        _in_thread(log.sync_truncation)
        assert fsyncs == []  # nothing left to make durable
    finally:
        log.close()


def test_the_producer_snapshot_of_a_roll_is_written_by_the_flush_not_by_the_roll(tmp_path, monkeypatch):
    written: list[tuple[str, str]] = []
    real = producer_state.write_snapshot

    def recording(path, entries):
        written.append((threading.current_thread().name, path.name))
        real(path, entries)

    monkeypatch.setattr(producer_state, "write_snapshot", recording)
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)  # one batch a segment
    try:
        _append(log, 0, 3)  # two rolls
        assert written == [] and not list(log.directory.glob("*.snapshot"))
        _in_thread(log.flush)
        assert written == [("disk", f"{1:020d}.snapshot"), ("disk", f"{2:020d}.snapshot")]
    finally:
        log.close(flush=False)


def test_a_snapshot_a_truncation_cut_while_it_was_written_is_deleted(tmp_path, monkeypatch):
    """The flush writes the roll's snapshot at 2 as the event loop cuts the log to 1: the file,
    past the new end, must not stay (a log grown again past 2 would trust it)."""
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)
    real = producer_state.write_snapshot

    def truncated_meanwhile(path, entries):
        real(path, entries)
        if path.name == f"{2:020d}.snapshot":
            log.truncate_to(1)

    monkeypatch.setattr(producer_state, "write_snapshot", truncated_meanwhile)
    try:
        _append(log, 0, 3)
        _in_thread(log.flush)
        assert sorted(p.name for p in log.directory.glob("*.snapshot")) == [f"{1:020d}.snapshot"]
        _append(log, 0, 1)  # offset 1 again, no roll: nothing pending
        log.truncate_to(0)  # cuts the pending snapshot at 1 before it is written
        _in_thread(log.flush)
        assert not list(log.directory.glob("*.snapshot"))
    finally:
        log.close(flush=False)


def test_batches_past_the_recovery_point_give_their_epochs_to_a_checkpoint_the_crash_left_behind(tmp_path):
    directory = tmp_path / "t-0"
    log = UnifiedLog.open(directory, LogConfig(), now_ms=NOW)
    log.assign_epoch_start_offset(1)
    _append(log, 1, 3)
    recovery_point = log.flush()
    stale = (directory / LEADER_EPOCH_CHECKPOINT).read_bytes()  # durable: flushed with the log
    log.assign_epoch_start_offset(2)
    _append(log, 2, 2)
    log.local.flush()  # the batches reach the disk (as the page cache may write them back) ...
    log.local.close(flush=False)
    (directory / LEADER_EPOCH_CHECKPOINT).write_bytes(stale)  # ... but the checkpoint's rename did not
    recovered = UnifiedLog.open(directory, LogConfig(), recovery_point=recovery_point, clean_shutdown=False,
                                now_ms=NOW)
    try:
        assert recovered.log_end_offset == 5
        assert recovered.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3)]
        assert recovered.end_offset_for_epoch(1) == (1, 3)
    finally:
        recovered.close()


def test_a_stale_checkpoint_entry_past_the_recovery_point_gives_way_to_the_batches(tmp_path):
    """A follower's truncation dropped an epoch with no batch, and lower-epoch batches from its
    leader followed; the crash kept the checkpoint from before the truncation."""
    directory = tmp_path / "t-0"
    log = UnifiedLog.open(directory, LogConfig(), now_ms=NOW)
    log.assign_epoch_start_offset(1)
    _append(log, 1, 3)
    log.assign_epoch_start_offset(3)  # led at epoch 3 and appended nothing
    recovery_point = log.flush()
    stale = (directory / LEADER_EPOCH_CHECKPOINT).read_bytes()
    log.truncate_to(3)  # as a follower: epoch 3 has no batch here
    log.append_as_follower(build_batch([(None, b"y", (), NOW)], base_offset=3, partition_leader_epoch=2), now_ms=NOW)
    log.local.flush()
    log.local.close(flush=False)
    (directory / LEADER_EPOCH_CHECKPOINT).write_bytes(stale)
    recovered = UnifiedLog.open(directory, LogConfig(), recovery_point=recovery_point, clean_shutdown=False,
                                now_ms=NOW)
    try:
        assert recovered.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(2, 3)]
    finally:
        recovered.close()
