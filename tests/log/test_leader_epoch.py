"""The leader epoch cache, truncation and follower appends of a partition log (KIP-101, KIP-279)."""

import os

import pytest

from tidemark.log import (
    CorruptRecordError,
    LeaderEpochFileCache,
    LogConfig,
    LogManager,
    UnexpectedAppendOffsetError,
    UnifiedLog,
)
from tidemark.log.checkpoint import read_checkpoint
from tidemark.log.manager import RECOVERY_POINT_CHECKPOINT
from tidemark.records import build_batch, decode_records, iter_batches

from .conftest import NOW, batch

CHECKPOINT = "leader-epoch-checkpoint"


def epoch_file(log: UnifiedLog) -> bytes:
    """The file as the log's next flush writes it (changes are written there, not at once)."""
    log.leader_epoch_cache.sync()
    return (log.directory / CHECKPOINT).read_bytes()


def read_all(log: UnifiedLog) -> bytes:
    """Every batch from the log start on (a read stops at a segment's end)."""
    data, offset = b"", log.log_start_offset
    while chunk := log.read(offset, 1 << 30):
        data += chunk
        offset = list(iter_batches(chunk))[-1][1].next_offset
    return data


def records(log: UnifiedLog) -> list[tuple[int, bytes]]:
    data = read_all(log)
    return [(r.offset, r.value) for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def epochs_of(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.partition_leader_epoch) for _, h in iter_batches(data)]


def write_epochs(log: UnifiedLog, plan: list[tuple[int, int]], size: int = 10) -> None:
    """Append batches of `n` records as leader in `epoch`, for each (epoch, n) of the plan."""
    for epoch, n in plan:
        log.append(batch(n, size=size), leader_epoch=epoch, now_ms=NOW)


# -- the checkpoint file --------------------------------------------------------------------


def test_checkpoint_file_is_kafkas_format_byte_for_byte(open_log):
    log = open_log()
    assert epoch_file(log) == b"0\n0\n"  # a new log has the file, with no entries
    write_epochs(log, [(0, 3), (0, 2), (2, 1), (5, 4), (5, 1)])
    assert epoch_file(log) == b"0\n3\n0 0\n2 5\n5 6\n"
    assert not (log.directory / (CHECKPOINT + ".tmp")).exists()


def test_a_new_leader_records_its_epoch_at_the_log_end_before_appending(open_log):
    log = open_log()
    write_epochs(log, [(1, 4)])
    log.assign_epoch_start_offset(3)
    assert epoch_file(log) == b"0\n2\n1 0\n3 4\n"
    assert log.end_offset_for_epoch(1) == (1, 4)  # epoch 1 ended where epoch 3 began
    write_epochs(log, [(3, 2)])
    assert epoch_file(log) == b"0\n2\n1 0\n3 4\n"  # the first batch of epoch 3 changes nothing


def test_the_cache_survives_a_restart(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    write_epochs(log, [(0, 2), (4, 3)])
    log.close()
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), clean_shutdown=True, now_ms=NOW)
    assert log.leader_epoch_cache.entries == [(0, 0), (4, 2)]
    log.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "wrong count", "not increasing"])
def test_a_missing_or_damaged_checkpoint_is_rebuilt_from_the_batches(tmp_path, damage):
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300), now_ms=NOW)
    write_epochs(log, [(0, 2), (0, 1), (3, 2), (3, 1), (7, 1)], size=60)
    assert len(log.segments) > 2
    log.close()
    path = tmp_path / "t-0" / CHECKPOINT
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes({"garbage": b"\x00\x01zz", "wrong count": b"0\n5\n0 0\n",
                          "not increasing": b"0\n2\n3 3\n0 0\n"}[damage])
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=300), clean_shutdown=True, now_ms=NOW)
    assert log.leader_epoch_cache.entries == [(0, 0), (3, 3), (7, 6)]
    assert path.read_bytes() == b"0\n3\n0 0\n3 3\n7 6\n"
    log.close()


def test_an_epoch_written_before_a_crash_cut_its_batch_is_dropped_on_load(tmp_path):
    # The entry reaches the file before the batch reaches the segment: a crash in between
    # leaves an entry at the log end, which loading drops.
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), now_ms=NOW)
    write_epochs(log, [(0, 3)])
    log.flush()
    log.leader_epoch_cache.assign(6, log.log_end_offset)
    log.local.close(flush=False)
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(), recovery_point=3, now_ms=NOW)
    assert log.leader_epoch_cache.entries == [(0, 0)]
    assert epoch_file(log) == b"0\n1\n0 0\n"
    log.close()


def test_retention_moves_the_first_epoch_up_to_the_log_start(open_log):
    size = len(batch(1, size=60))
    log = open_log(LogConfig(segment_bytes=size, retention_bytes=3 * size))  # one batch per segment
    write_epochs(log, [(1, 1), (1, 1), (2, 1), (2, 1), (2, 1), (4, 1)], size=60)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retention(NOW) == 3
    assert log.log_start_offset == 3
    assert log.leader_epoch_cache.entries == [(2, 3), (4, 5)]
    assert epoch_file(log) == b"0\n2\n2 3\n4 5\n"


# -- KIP-279's answers ----------------------------------------------------------------------


def test_end_offset_for_epoch_answers_as_kip_279(open_log):
    log = open_log()
    assert log.end_offset_for_epoch(0) == (-1, -1)  # nothing known yet
    write_epochs(log, [(1, 10), (3, 10), (5, 10)])  # epoch 1: [0, 10), 3: [10, 20), 5: [20, 30)
    assert log.end_offset_for_epoch(5) == (5, 30)  # the latest epoch ends at the log end
    assert log.end_offset_for_epoch(4) == (3, 20)  # the largest epoch <= 4, and where it ended
    assert log.end_offset_for_epoch(3) == (3, 20)
    assert log.end_offset_for_epoch(2) == (1, 10)
    assert log.end_offset_for_epoch(1) == (1, 10)
    assert log.end_offset_for_epoch(0) == (0, 0)  # below the first epoch: where the first began
    assert log.end_offset_for_epoch(6) == (-1, -1)  # newer than any epoch known
    assert log.end_offset_for_epoch(-1) == (-1, -1)


def test_end_offset_below_the_first_epoch_after_retention_is_where_the_log_starts():
    cache = LeaderEpochFileCache(None, [])
    for epoch, start in [(2, 0), (3, 50), (6, 80)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(60)
    assert cache.entries == [(3, 60), (6, 80)]
    assert cache.end_offset_for(2, 100) == (2, 60)
    assert cache.end_offset_for(4, 100) == (3, 80)


def test_assigning_an_older_epoch_or_offset_drops_the_entries_it_contradicts():
    cache = LeaderEpochFileCache(None, [])
    assert cache.assign(1, 0) and cache.assign(3, 10) and cache.assign(5, 20)
    assert not cache.assign(5, 25)  # the same epoch further on: nothing to record
    assert cache.assign(4, 15)  # epochs >= 4 or starting at >= 15 go
    assert cache.entries == [(1, 0), (3, 10), (4, 15)]
    with pytest.raises(ValueError):
        cache.assign(-1, 3)


# -- truncation -----------------------------------------------------------------------------


def test_truncate_then_append_continues_from_the_cut(open_log):
    log = open_log()
    write_epochs(log, [(0, 3), (1, 2), (2, 4)])  # offsets 0-2 epoch 0, 3-4 epoch 1, 5-8 epoch 2
    log.update_high_watermark(9)
    log.flush()
    assert log.truncate_to(5)
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (5, 5, 5)
    assert log.leader_epoch_cache.entries == [(0, 0), (1, 3)]
    assert epoch_file(log) == b"0\n2\n0 0\n1 3\n"
    info = log.append(batch(2), leader_epoch=3, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (5, 6)
    assert [o for o, _ in records(log)] == list(range(7))
    assert epochs_of(log.read(0, 1 << 20)) == [(0, 0), (3, 1), (5, 3)]
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert not log.truncate_to(7)  # at the log end: nothing to cut


def test_truncate_inside_a_batch_removes_the_whole_batch(open_log):
    log = open_log()
    write_epochs(log, [(0, 3), (1, 4)])
    assert log.truncate_to(5)
    assert log.log_end_offset == 3
    assert log.leader_epoch_cache.entries == [(0, 0)]


def test_truncate_across_segments_removes_files_and_keeps_indexes_right(tmp_path):
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = UnifiedLog.open(tmp_path / "t-0", config, now_ms=NOW)
    for i in range(30):
        log.append(batch(2, ts=NOW + 10 * i, size=40), leader_epoch=i // 10, now_ms=NOW)
    log.update_high_watermark(60)
    log.flush()
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    target = bases[2] + 2  # the second batch of the third segment
    assert log.truncate_to(target)
    assert [s.base_offset for s in log.segments] == bases[:3]
    on_disk = sorted(p.name for p in log.directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))
    assert on_disk == sorted(f"{b:020d}{ext}" for b in bases[:3] for ext in (".log", ".index", ".timeindex"))
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (target, target, target)
    assert [o for o, _ in records(log)] == list(range(target))
    for offset in range(target):  # every offset is found through the (rewritten) offset index
        (_, h), *_ = iter_batches(log.read(offset, 1))
        assert h.base_offset <= offset <= h.last_offset
    assert log.offset_for_timestamp(NOW + 10 * (target // 2 - 1)) == (target - 2, NOW + 10 * (target // 2 - 1))
    assert log.offset_for_timestamp(NOW + 10 * (target // 2)) is None
    # The cut segment is active again: appends go on in it, and a restart reads the same.
    log.append(batch(2, ts=NOW + 5000), leader_epoch=7, now_ms=NOW)
    assert log.segments[-1].base_offset == bases[2]
    expected = records(log)
    log.close()
    log = UnifiedLog.open(tmp_path / "t-0", config, clean_shutdown=True, now_ms=NOW)
    assert records(log) == expected
    assert log.leader_epoch_cache.entries[-1] == (7, target)
    log.close()


def test_truncate_below_the_first_segment_starts_over_there(open_log):
    log = open_log(LogConfig(segment_bytes=200, retention_bytes=0))
    write_epochs(log, [(1, 1)] * 6, size=60)
    log.update_high_watermark(log.log_end_offset)
    log.delete_retention(NOW)
    start = log.log_start_offset
    assert start > 1
    assert log.truncate_to(1)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1, 1, 1)
    assert log.leader_epoch_cache.entries == []


def test_truncate_fully_and_start_at(open_log):
    log = open_log(LogConfig(segment_bytes=200))
    for _ in range(6):
        log.append(batch(1, size=60, producer_id=7, producer_epoch=0, base_sequence=_), leader_epoch=2, now_ms=NOW)
    log.flush()  # writes the producer snapshots taken at the rolls
    assert any(p.suffix == ".snapshot" for p in log.directory.iterdir())
    log.truncate_fully_and_start_at(100)
    log.sync_truncation()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (100, 100, 100, 100)
    assert [s.base_offset for s in log.segments] == [100]
    assert sorted(p.name for p in log.directory.iterdir()) == sorted(
        [f"{100:020d}.log", f"{100:020d}.index", f"{100:020d}.timeindex", CHECKPOINT])
    assert epoch_file(log) == b"0\n0\n"
    assert log.producer_state.producers == {}
    leader = build_batch([(None, b"v", (), NOW)], base_offset=100, partition_leader_epoch=4)
    log.append_as_follower(leader)
    assert log.log_end_offset == 101 and log.leader_epoch_cache.entries == [(4, 100)]


def test_truncation_rebuilds_producer_state_from_what_is_left(open_log):
    log = open_log(LogConfig(segment_bytes=250))
    for seq in range(8):  # one record per batch, sequences 0..7, offsets 0..7
        log.append(batch(1, size=60, producer_id=7, producer_epoch=0, base_sequence=seq), now_ms=NOW)
    assert len(log.segments) > 2
    assert log.truncate_to(5, now_ms=NOW)
    assert not any(int(p.stem) > 5 for p in log.directory.iterdir() if p.suffix == ".snapshot")
    again = log.append(batch(1, size=60, producer_id=7, producer_epoch=0, base_sequence=4), now_ms=NOW)
    assert again.duplicate and again.first_offset == 4  # a batch still in the log is a duplicate
    info = log.append(batch(1, size=60, producer_id=7, producer_epoch=0, base_sequence=5), now_ms=NOW)
    assert not info.duplicate and info.first_offset == 5  # the cut batch's sequence is free again


def test_a_crash_after_truncation_and_new_appends_recovers_them(tmp_path):
    manager = LogManager(tmp_path)
    manager.open(now_ms=NOW)
    log = manager.get_or_create("t", 0, LogConfig(segment_bytes=300))
    for seq in range(10):
        log.append(batch(1, size=60, producer_id=3, producer_epoch=0, base_sequence=seq), leader_epoch=1,
                   now_ms=NOW)
    log.flush()
    manager.checkpoint()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)[("t", 0)] == 10
    log.truncate_to(4, now_ms=NOW)
    # The recovery point went down: it is checkpointed at once (on the disk thread, before the
    # log rolls), or a restart would trust segments written after the truncation as flushed.
    manager.checkpoints_written()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)[("t", 0)] == 4
    for seq in range(4, 9):
        log.append(batch(1, size=60, producer_id=3, producer_epoch=0, base_sequence=seq), leader_epoch=2,
                   now_ms=NOW)
    expected = records(log)
    # A crash: nothing flushed, closed, or checkpointed from here on.
    log.local.close(flush=False)
    os.ftruncate(os.open(log.segments[-1].log_path, os.O_RDWR), log.segments[-1].size - 3)  # a torn tail
    manager._dir_lock.release()
    manager = LogManager(tmp_path)
    manager.open(now_ms=NOW)
    log = manager.get("t", 0)
    assert log.offline is None
    assert records(log) == expected[:-1]
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 4)]
    info = log.append(batch(1, size=60, producer_id=3, producer_epoch=0, base_sequence=8), leader_epoch=2,
                      now_ms=NOW)
    assert (info.first_offset, info.duplicate) == (8, False)
    manager.close()


def test_a_flush_racing_a_truncation_does_not_raise_the_recovery_point(open_log, monkeypatch):
    log = open_log()
    write_epochs(log, [(0, 5), (0, 5)])
    real_fsync = os.fsync
    calls = []

    def fsync_then_truncate(fd):  # the flusher thread syncs outside the lock; truncate meanwhile
        real_fsync(fd)
        if not calls:
            calls.append(fd)
            log.truncate_to(5)

    monkeypatch.setattr("tidemark.log.local_log.os.fsync", fsync_then_truncate)
    log.flush()
    assert log.log_end_offset == 5
    assert log.recovery_point <= 5
    assert log.segments[-1].flushed_size <= log.segments[-1].size


# -- follower appends -------------------------------------------------------------------------


def test_append_as_follower_keeps_offsets_epochs_and_bytes(tmp_path):
    leader = UnifiedLog.open(tmp_path / "leader-0", LogConfig(), now_ms=NOW)
    follower = UnifiedLog.open(tmp_path / "follower-0", LogConfig(segment_bytes=500), now_ms=NOW)
    write_epochs(leader, [(0, 3), (2, 2), (2, 1), (5, 3)], size=80)
    for seq in range(3):
        leader.append(batch(1, producer_id=9, producer_epoch=1, base_sequence=seq), leader_epoch=5, now_ms=NOW)
    data = leader.read(0, 1 << 20)
    info = follower.append_as_follower(data, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, leader.log_end_offset - 1)
    assert follower.log_end_offset == leader.log_end_offset
    assert read_all(follower) == data  # byte for byte, split over segments
    assert len(follower.segments) > 1
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [(0, 0), (2, 3), (5, 6)]
    assert epoch_file(follower) == epoch_file(leader)
    assert follower.high_watermark == 0  # the replication code moves it, from the leader's
    # The producer's state came along: its next batch, once this replica leads, follows on.
    follower.assign_epoch_start_offset(6)
    again = follower.append(batch(1, producer_id=9, producer_epoch=1, base_sequence=2), leader_epoch=6, now_ms=NOW)
    assert again.duplicate and again.first_offset == leader.log_end_offset - 1
    nxt = follower.append(batch(1, producer_id=9, producer_epoch=1, base_sequence=3), leader_epoch=6, now_ms=NOW)
    assert not nxt.duplicate and nxt.first_offset == leader.log_end_offset
    leader.close()
    follower.close()


def test_append_as_follower_refuses_batches_that_do_not_continue_the_log(open_log):
    log = open_log()
    first = build_batch([(None, b"a", (), NOW), (None, b"b", (), NOW)], base_offset=0, partition_leader_epoch=1)
    log.append_as_follower(first)
    assert log.log_end_offset == 2
    overlapping = build_batch([(None, b"c", (), NOW)], base_offset=1, partition_leader_epoch=1)
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(overlapping)
    out_of_order = (build_batch([(None, b"c", (), NOW)] * 3, base_offset=2, partition_leader_epoch=1)
                    + build_batch([(None, b"d", (), NOW)], base_offset=3, partition_leader_epoch=2))
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(out_of_order)
    corrupt = bytearray(build_batch([(None, b"e", (), NOW)], base_offset=2, partition_leader_epoch=2))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(corrupt))
    assert log.log_end_offset == 2 and [v for _, v in records(log)] == [b"a", b"b"]  # nothing written
    assert log.leader_epoch_cache.entries == [(1, 0)]
    # Compaction on the leader removes whole batches: a batch past the log end is taken.
    compacted = build_batch([(None, b"f", (), NOW)], base_offset=7, partition_leader_epoch=2)
    log.append_as_follower(compacted)
    assert log.log_end_offset == 8 and records(log)[-1] == (7, b"f")
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 7)]
