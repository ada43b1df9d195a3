import os
import threading

import pytest

from tidemark.log import (
    CorruptRecordError,
    UnifiedLog,
    LogConfig,
    OffsetOutOfRangeError,
)
from tidemark.records import decode_records, iter_batches, read_header

from .conftest import NOW, batch


def offsets(data: bytes) -> list[int]:
    return [r.offset for pos, _ in iter_batches(data) for r in decode_records(data, pos)]


def test_append_assigns_offsets_and_leader_epoch(open_log):
    log = open_log()
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    info = log.append(batch(3, base_offset=999), leader_epoch=4, now_ms=NOW)
    assert (info.first_offset, info.last_offset, info.duplicate) == (0, 2, False)
    assert (info.max_timestamp, info.offset_of_max_timestamp, info.log_append_time) == (NOW + 2, 2, -1)
    info = log.append(batch(2) + batch(1), now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (3, 5)
    assert log.log_end_offset == 6
    data = log.read(0, 1 << 20)
    assert offsets(data) == list(range(6))
    assert [h.partition_leader_epoch for _, h in iter_batches(data)] == [4, 0, 0]


def test_read_returns_the_stored_bytes_exactly(open_log):
    log = open_log()
    written = [batch(i + 1, size=i) for i in range(20)]
    for b in written:
        log.append(b, now_ms=NOW)
    data = log.read(0, 1 << 20)
    assert len(data) == sum(map(len, written)) == log.size_in_bytes
    for (pos, h), original in zip(iter_batches(data), written):
        # identical apart from the rewritten base offset (outside the CRC)
        assert data[pos + 8 : pos + h.size] == original[8:]
    assert data == open(log.active_segment.log_path, "rb").read()


def test_read_starts_at_the_batch_containing_the_offset(open_log):
    log = open_log()
    for _ in range(10):
        log.append(batch(5), now_ms=NOW)
    for offset in range(50):
        data = log.read(offset, 1)  # max_bytes 1: the first batch only
        (_, h), = iter_batches(data)
        assert h.base_offset <= offset <= h.last_offset
    assert log.read(50, 1000) == b""


def test_read_max_bytes_and_min_one_batch(open_log):
    log = open_log()
    for _ in range(5):
        log.append(batch(1, size=100), now_ms=NOW)
    one = len(batch(1, size=100))
    assert len(log.read(0, one * 2)) == one * 2
    assert len(log.read(0, one * 2 + one - 1)) == one * 2
    assert len(log.read(0, 10)) == one
    assert log.read(0, 10, min_one_batch=False) == b""


def test_read_stops_before_the_upper_bound(open_log):
    log = open_log()
    for _ in range(4):
        log.append(batch(3), now_ms=NOW)  # batches 0-2, 3-5, 6-8, 9-11
    assert offsets(log.read(0, 1 << 20, upper_bound=6)) == list(range(6))
    assert offsets(log.read(0, 1 << 20, upper_bound=7)) == list(range(6))  # 6-8 reaches the bound
    assert log.read(6, 1 << 20, upper_bound=6) == b""
    assert log.read(7, 1 << 20, upper_bound=6) == b""
    assert log.read(12, 1 << 20) == b""


def test_read_out_of_range(open_log):
    log = open_log()
    log.append(batch(2), now_ms=NOW)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_invalid_request_stores_nothing(open_log):
    log = open_log()
    good = batch(2)
    bad = bytearray(batch(2))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(bad), now_ms=NOW)
    with pytest.raises(CorruptRecordError):
        log.append(good + good[:30], now_ms=NOW)  # partial trailing batch
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    assert log.append(b"", now_ms=NOW).first_offset == -1


def test_roll_by_size(open_log):
    b = batch(1, size=100)
    log = open_log(LogConfig(segment_bytes=len(b) * 3))
    for _ in range(10):
        log.append(b, now_ms=NOW)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size <= len(b) * 3 for s in log.segments)
    log.flush()  # writes the producer snapshots taken at the rolls
    assert sorted(os.listdir(log.directory)) == sorted(
        [f"{base:020d}{ext}" for base in (0, 3, 6, 9) for ext in (".log", ".index", ".timeindex")]
        + [f"{base:020d}.snapshot" for base in (6, 9)]  # producer state at the last two rolls
        + ["leader-epoch-checkpoint"]
    )
    assert offsets(log.read(0, 1 << 20)) == [0, 1, 2]  # one segment per read
    assert offsets(log.read(4, 1 << 20)) == [4, 5]


def test_roll_by_time(open_log):
    log = open_log(LogConfig(segment_ms=1000))
    log.append(batch(), now_ms=NOW)
    log.append(batch(), now_ms=NOW + 1000)
    assert len(log.segments) == 1
    log.append(batch(), now_ms=NOW + 1001)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append(batch(), now_ms=NOW + 1500)
    assert len(log.segments) == 2


def test_index_lookups_after_many_appends(open_log):
    log = open_log(LogConfig(index_interval_bytes=256, segment_bytes=64 * 1024))
    for i in range(600):
        log.append(batch(1 + i % 4, size=i % 50), now_ms=NOW)
    assert len(log.segments) > 1
    assert all(len(s.offset_index) > 5 for s in log.segments[:-1])
    for seg in log.segments:
        for rel, pos in seg.offset_index.entries():
            h = read_header(seg.read(pos, 61))
            assert h.last_offset == seg.base_offset + rel
    end = log.log_end_offset
    for offset in range(0, end, 7):
        (_, h), = iter_batches(log.read(offset, 1))
        assert h.base_offset <= offset <= h.last_offset


def test_offset_for_timestamp(open_log):
    log = open_log(LogConfig(index_interval_bytes=100, segment_bytes=2000))
    # timestamps within a batch are not ordered: 10 records per batch, batch i covers i*100..
    for i in range(30):
        log.append(_unordered(i), now_ms=NOW)
    every = []
    for seg in log.segments:
        data = seg.read(0, seg.size)
        every += [r for pos, _ in iter_batches(data) for r in decode_records(data, pos)]
    assert len(every) == 300
    for target in [-5, 0, 1, 55, 99, 100, 1234, 2905, 2999, 3000, 3001, 10_000]:
        expected = next(((r.offset, r.timestamp) for r in every if r.timestamp >= target), None)
        assert log.offset_for_timestamp(target) == expected, target
    assert log.offset_for_timestamp(0, upper_bound=0) is None


def _unordered(i: int) -> bytes:
    from tidemark.records import build_batch

    ts = [i * 100 + (j * 7) % 10 * 10 for j in range(10)]  # shuffled within the batch
    return build_batch([(None, b"v", (), t) for t in ts])


def test_retention_by_time(open_log):
    b = batch(1, size=100)
    log = open_log(LogConfig(segment_bytes=len(b) * 2, retention_ms=1000))
    for i in range(8):
        log.append(batch(1, size=100, ts=NOW + i * 100), now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert log.delete_retention(NOW + 1101) == 1  # segment 0 (max ts NOW+100) expired
    assert log.log_start_offset == 2
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert offsets(log.read(2, 1 << 20)) == [2, 3]
    assert log.delete_retention(NOW + 100_000) == 2  # never the active segment
    assert log.log_start_offset == 6 and len(log.segments) == 1
    assert not any(name.startswith("00000000000000000000") for name in os.listdir(log.directory))


def test_retention_by_size(open_log):
    b = batch(1, size=100)
    log = open_log(LogConfig(segment_bytes=len(b) * 2, retention_ms=-1, retention_bytes=len(b) * 5))
    for _ in range(10):
        log.append(b, now_ms=NOW)
    log.update_high_watermark(log.log_end_offset)
    assert log.size_in_bytes == len(b) * 10
    # Kafka deletes a segment only if the log stays at or above retention.bytes without it
    assert log.delete_retention(NOW) == 2
    assert log.size_in_bytes == len(b) * 6
    assert log.log_start_offset == 4


def test_retention_only_below_high_watermark_and_with_delete_policy(open_log, tmp_path):
    b = batch(1, size=100)
    log = open_log(LogConfig(segment_bytes=len(b) * 2, retention_ms=0))
    for _ in range(6):
        log.append(b, now_ms=NOW)
    log.update_high_watermark(3)  # segment 2-3 is not wholly below it
    assert log.delete_retention(NOW + 10**9) == 1
    assert log.log_start_offset == 2
    compact = UnifiedLog.open(tmp_path / "c-0", LogConfig(segment_bytes=len(b) * 2, retention_ms=0, cleanup_policy="compact"))
    for _ in range(6):
        compact.append(b, now_ms=NOW)
    compact.update_high_watermark(6)
    assert compact.delete_retention(NOW + 10**9) == 0
    compact.close()


def test_flush_advances_recovery_point(open_log):
    log = open_log()
    assert log.recovery_point == 0
    log.append(batch(3), now_ms=NOW)
    assert log.recovery_point == 0
    assert log.flush() == 3 == log.recovery_point
    assert log.active_segment.flushed_size == log.active_segment.size


def test_flush_from_a_thread_while_appending_and_deleting(open_log):
    b = batch(2, size=200)
    log = open_log(LogConfig(segment_bytes=len(b) * 3, retention_ms=-1, retention_bytes=len(b) * 6))
    errors = []
    done = threading.Event()

    def flusher():
        try:
            while not done.is_set():
                assert log.flush() <= log.log_end_offset
        except BaseException as e:  # noqa: BLE001 - report anything to the main thread
            errors.append(e)

    t = threading.Thread(target=flusher)
    t.start()
    try:
        for i in range(300):
            log.append(b, now_ms=NOW)
            log.update_high_watermark(log.log_end_offset)
            if i % 10 == 0:
                log.delete_retention(NOW)
    finally:
        done.set()
        t.join(10)
    assert not errors
    assert log.flush() == log.log_end_offset == 600


def test_delete_removes_the_directory(open_log):
    log = open_log()
    log.append(batch(), now_ms=NOW)
    log.delete()
    assert not log.directory.exists()


def test_log_append_time_topics_stamp_batches_with_the_broker_clock(open_log):
    log = open_log(LogConfig(message_timestamp_type="LogAppendTime"))
    info = log.append(batch(3, ts=5), now_ms=NOW + 42)
    assert info.log_append_time == NOW + 42 and info.max_timestamp == NOW + 42
    ((_, header),) = list(iter_batches(log.read(0, 1 << 20)))
    assert header.timestamp_type == 1 and header.max_timestamp == NOW + 42


def test_failed_write_leaves_no_partial_batch_and_takes_the_log_offline(open_log, monkeypatch):
    import tidemark.log.segment as segment_module
    from tidemark.log import LogOfflineError

    log = open_log()
    log.append(batch(2), now_ms=NOW)
    size_before = log.active_segment.size
    real_write = os.write

    def half_then_fail(fd, data):
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segment_module.os, "write", half_then_fail)
    with pytest.raises(LogOfflineError):
        log.append(batch(3), now_ms=NOW)
    monkeypatch.setattr(segment_module.os, "write", real_write)
    assert os.path.getsize(log.active_segment.log_path) == size_before  # the partial batch is gone
    with pytest.raises(LogOfflineError):  # no more writes until a restart recovers the log
        log.append(batch(1), now_ms=NOW)
    with pytest.raises(LogOfflineError):
        log.flush()
    assert log.log_end_offset == 2 and len(log.read(0, 1 << 20)) == size_before


def test_failed_fsync_takes_the_log_offline(open_log, monkeypatch):
    import tidemark.log.local_log as log_module
    from tidemark.log import LogOfflineError

    log = open_log()
    log.append(batch(1), now_ms=NOW)
    monkeypatch.setattr(log_module.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(LogOfflineError):
        log.flush()
    monkeypatch.undo()
    with pytest.raises(LogOfflineError):  # a later fsync "succeeding" must not advance anything
        log.flush()
    assert log.recovery_point == 0



def _read_from_files(log, offset: int, max_bytes: int, bound: int, min_one_batch: bool) -> bytes:
    """What a read returns by the rules alone, from every segment file's batches."""
    for seg in log.segments:
        data = open(seg.log_path, "rb").read()
        batches = [(pos, h) for pos, h in iter_batches(data) if h.last_offset >= offset]
        if not batches:
            continue
        start = stop = batches[0][0]
        for pos, h in batches:
            if h.last_offset >= bound or (pos + h.size - start > max_bytes and not (min_one_batch and stop == start)):
                break
            stop = pos + h.size
        return data[start:stop]
    return b""


def test_reads_at_the_tail_match_reads_from_the_files(open_log):
    """The last batches appended are found from memory (where followers read); every read must
    return what the rules give from the files, across a roll and after a follower's truncation."""
    log = open_log(LogConfig(segment_bytes=6000, index_interval_bytes=200))

    def check() -> None:
        end = log.log_end_offset
        for offset in range(max(0, end - 60), end + 1):
            for max_bytes in (1, 150, 1 << 20):
                for bound in (end, max(offset, end - 3)):
                    for min_one in (True, False):
                        read = log.read(offset, max_bytes, upper_bound=bound, min_one_batch=min_one)
                        expected = _read_from_files(log, offset, max_bytes, bound, min_one)
                        assert read == expected, (offset, max_bytes, bound, min_one)

    for i in range(80):
        log.append(batch(1 + i % 4, size=10 + 7 * (i % 5)), now_ms=NOW)
        if i % 10 == 9:
            check()
    assert len(log.segments) > 1
    log.truncate_to(log.log_end_offset - 7)  # inside a batch: it goes, and all after it
    check()
    for i in range(3):
        log.append(batch(2), now_ms=NOW)
        check()
