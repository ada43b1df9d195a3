import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kio.schema.errors import ErrorCode

from tidemark.broker.errors import error_code_for
from tidemark.log import LogConfig, LogOfflineError, UnifiedLog
from tidemark.log import segment as segment_module
from tidemark.log.errors import CorruptSegmentError
from tidemark.log.segment import LogSegment
from tidemark.records import CorruptRecordError, decode_records, iter_batches

from .conftest import NOW, batch

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=128)


def all_records(log: UnifiedLog) -> list[tuple[int, bytes]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, offset
        for pos, h in iter_batches(data):
            out += [(r.offset, r.value) for r in decode_records(data, pos)]
            offset = h.next_offset
    return out


def fill(path, n: int) -> list[tuple[int, bytes]]:
    log = UnifiedLog.open(path, CONFIG)
    for i in range(n):
        log.append(batch(1 + i % 3, size=20 + i), now_ms=NOW)
    expected = all_records(log)
    log.close()
    return expected


def last_batch_span(log_path) -> tuple[int, int]:
    data = log_path.read_bytes()
    *_, (pos, h) = iter_batches(data)
    return pos, pos + h.size


def test_truncation_at_every_byte_of_the_last_batch(tmp_path):
    path = tmp_path / "t-0"
    expected = fill(path, 12)
    seg_path = sorted(path.glob("*.log"))[-1]
    original = seg_path.read_bytes()
    start, end = last_batch_span(seg_path)
    *_, (_, last) = iter_batches(original)
    lost = set(range(last.base_offset, last.next_offset))
    survivors = [r for r in expected if r[0] not in lost]
    for cut in range(start, end):
        seg_path.write_bytes(original[:cut])
        log = UnifiedLog.open(path, CONFIG, clean_shutdown=False)
        assert seg_path.stat().st_size == start
        assert all_records(log) == survivors
        assert log.log_end_offset == min(lost)
        info = log.append(batch(2), now_ms=NOW)
        assert info.first_offset == min(lost)
        log.close()
    seg_path.write_bytes(original)
    log = UnifiedLog.open(path, CONFIG)
    assert all_records(log) == expected
    log.close()


def test_garbage_tail_is_cut(tmp_path):
    path = tmp_path / "t-0"
    expected = fill(path, 20)
    seg_path = sorted(path.glob("*.log"))[-1]
    size = seg_path.stat().st_size
    for garbage in [b"\x00" * 100, os.urandom(3), os.urandom(500), batch(1)[:-1] + b"\x00"]:
        with open(seg_path, "ab") as f:
            f.write(garbage)
        log = UnifiedLog.open(path, CONFIG, clean_shutdown=False)
        assert seg_path.stat().st_size == size
        assert all_records(log) == expected
        log.close()


def test_corrupt_middle_segment_cuts_it_and_everything_after(tmp_path):
    path = tmp_path / "t-0"
    fill(path, 60)
    segs = sorted(path.glob("*.log"))
    assert len(segs) >= 3
    victim = segs[1]
    data = bytearray(victim.read_bytes())
    start, _ = last_batch_span(victim)
    data[start + 30] ^= 0xFF  # inside the last batch's CRC-covered bytes
    victim.write_bytes(bytes(data))
    log = UnifiedLog.open(path, CONFIG, clean_shutdown=False)
    assert [s.log_path for s in log.segments] == segs[:2]
    assert victim.stat().st_size == start
    assert log.log_end_offset == log.segments[-1].next_offset
    assert log.recovery_point == log.log_end_offset
    log.close()


def test_recovery_point_limits_validation(tmp_path):
    path = tmp_path / "t-0"
    fill(path, 60)
    segs = sorted(path.glob("*.log"))
    data = bytearray(segs[0].read_bytes())
    data[-1] ^= 0xFF  # a flipped byte in a flushed segment is not looked for
    segs[0].write_bytes(bytes(data))
    log = UnifiedLog.open(path, CONFIG, recovery_point=int(segs[2].stem), clean_shutdown=False)
    assert len(log.segments) == len(segs)
    log.close()
    log = UnifiedLog.open(path, CONFIG, recovery_point=0, clean_shutdown=False)
    assert len(log.segments) == 1
    log.close()


def test_indexes_are_rebuilt(tmp_path):
    path = tmp_path / "t-0"
    expected = fill(path, 60)
    log = UnifiedLog.open(path, CONFIG, clean_shutdown=True)
    indexes = {s.base_offset: (s.offset_index.entries(), s.time_index.entries()) for s in log.segments}
    log.close()
    assert any(entries for entries, _ in indexes.values())
    for p in path.glob("*.index"):
        p.unlink()
    for p in list(path.glob("*.timeindex"))[:2]:
        p.write_bytes(p.read_bytes()[:-5])  # torn
    for p in list(path.glob("*.timeindex"))[2:3]:
        p.write_bytes(b"\x00" * 24)  # wrong
    log = UnifiedLog.open(path, CONFIG, clean_shutdown=True)
    assert {s.base_offset: (s.offset_index.entries(), s.time_index.entries()) for s in log.segments} == indexes
    assert all_records(log) == expected
    log.close()
    on_disk = {p.name: p.read_bytes() for p in path.glob("*index")}
    log = UnifiedLog.open(path, CONFIG, clean_shutdown=True)
    log.close()
    assert {p.name: p.read_bytes() for p in path.glob("*index")} == on_disk  # consistent now: untouched


def test_stray_files_are_removed(tmp_path):
    path = tmp_path / "t-0"
    fill(path, 3)
    (path / "00000000000000000099.index").write_bytes(b"")
    (path / "00000000000000000000.log.deleted").write_bytes(b"x")
    log = UnifiedLog.open(path, CONFIG)
    log.close()
    assert sorted(p.name for p in path.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex",
        f"{log.log_end_offset:020d}.snapshot",  # producer state at the clean close
        "leader-epoch-checkpoint",
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=25),
    damage=st.one_of(
        st.tuples(st.just("cut"), st.floats(0, 1)),
        st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=200)),
    ),
)
def test_random_appends_then_damage(tmp_path_factory, sizes, damage):
    path = tmp_path_factory.mktemp("log") / "t-0"
    config = LogConfig(segment_bytes=1500, index_interval_bytes=200)
    log = UnifiedLog.open(path, config)
    for n, size in sizes:
        log.append(batch(n, size=size), now_ms=NOW)
    expected = all_records(log)
    log.close()
    seg_path = sorted(path.glob("*.log"))[-1]
    data = seg_path.read_bytes()
    spans = [(pos, pos + h.size, h) for pos, h in iter_batches(data)]
    kind, arg = damage
    if kind == "cut":
        cut = int(arg * len(data))
        seg_path.write_bytes(data[:cut])
        lost_from = next((h.base_offset for pos, end, h in spans if end > cut), None)
    else:
        seg_path.write_bytes(data + arg)
        lost_from = None
    survivors = [r for r in expected if lost_from is None or r[0] < lost_from]
    log = UnifiedLog.open(path, config, clean_shutdown=False)
    assert all_records(log) == survivors
    end = survivors[-1][0] + 1 if survivors else int(seg_path.stem)
    assert log.log_end_offset == end
    assert log.append(batch(1), now_ms=NOW).first_offset == end
    assert all_records(log)[-1][0] == end
    log.close()


def _flip_length_bit(seg_path) -> None:
    """Flip a bit of the first batch's length field: the batch framing can no longer be walked."""
    data = bytearray(seg_path.read_bytes())
    data[8] ^= 0x40
    seg_path.write_bytes(bytes(data))


@pytest.mark.parametrize("clean", [True, False])
def test_corrupt_flushed_segment_takes_the_partition_offline_and_deletes_nothing(tmp_path, clean):
    path = tmp_path / "t-0"
    expected = fill(path, 130)
    segs = sorted(path.glob("*.log"))
    assert len(segs) >= 6
    _flip_length_bit(segs[1])
    before = {p.name: p.read_bytes() for p in path.iterdir()}
    log = UnifiedLog.open(path, CONFIG, recovery_point=expected[-1][0] + 1, clean_shutdown=clean)
    try:
        # Below the recovery point nothing is rescanned (producer state comes from its
        # snapshot), so the damage shows when the segment is read: never as lost later data.
        assert log.log_end_offset == expected[-1][0] + 1  # the later segments are all there
        with pytest.raises(CorruptSegmentError, match=segs[1].name):
            log.read(int(segs[1].stem), 1 << 20)
        assert isinstance(log.offline, CorruptSegmentError)
        assert segs[1].name in str(log.offline)
        with pytest.raises(LogOfflineError):
            log.append(batch(1), now_ms=NOW)
        assert error_code_for(LogOfflineError("x")) == ErrorCode.kafka_storage_error
        assert log.read(0, 1 << 20)  # what precedes it still reads
    finally:
        log.close()
    assert {p.name: p.read_bytes() for p in path.iterdir()} == before  # no file touched


def test_corruption_found_at_read_time_takes_the_partition_offline(tmp_path):
    path = tmp_path / "t-0"
    fill(path, 130)
    log = UnifiedLog.open(path, CONFIG, clean_shutdown=True)
    seg = log.segments[2]
    _flip_length_bit(seg.log_path)
    with pytest.raises(CorruptSegmentError, match=seg.log_path.name):
        log.read(seg.base_offset, 1 << 20)
    assert isinstance(log.offline, CorruptSegmentError)
    with pytest.raises(LogOfflineError):
        log.append(batch(1), now_ms=NOW)
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_restart_below_the_recovery_point_reads_only_batch_headers(tmp_path, monkeypatch, clean):
    path = tmp_path / "t-0"
    config = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=4096)
    log = UnifiedLog.open(path, config)
    for i in range(200):
        log.append(batch(4, size=1000, ts=NOW + i), now_ms=NOW + i)
    end, segments = log.log_end_offset, len(log.segments)
    log.close()
    total = sum(p.stat().st_size for p in path.glob("*.log"))
    read = []
    real = segment_module.pread_exact
    monkeypatch.setattr(segment_module, "pread_exact", lambda fd, n, pos: read.append(n) or real(fd, n, pos))
    log = UnifiedLog.open(path, config, recovery_point=end, clean_shutdown=clean)
    assert (log.log_end_offset, len(log.segments), log.offline) == (end, segments, None)
    assert sum(read) < total * 0.05  # 61 header bytes per 4 KB batch, plus each segment's tail
    assert log.max_timestamp_entry() == (end - 1, NOW + 199 + 3)
    log.close()


def test_a_new_partition_directory_is_fsynced_with_its_parent(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real(fd))
    log = UnifiedLog.open(tmp_path / "new-0", CONFIG, clean_shutdown=True)
    assert str(tmp_path / "new-0") in synced and str(tmp_path) in synced
    log.close()


def test_a_batch_failing_its_crc_is_named_by_its_file_position(tmp_path):
    """The scan reads a segment in chunks; its error names where the bad batch is in the file,
    not in the chunk (here the scan starts at the second batch)."""
    path = tmp_path / "t-0"
    fill(path, 6)
    seg_path = sorted(path.glob("*.log"))[0]
    data = bytearray(seg_path.read_bytes())
    positions = [pos for pos, _ in iter_batches(bytes(data))]
    data[positions[3] + 61] ^= 0xFF  # a byte of the fourth batch's records
    seg_path.write_bytes(bytes(data))
    seg = LogSegment(path, 0, index_interval_bytes=128, index_max_bytes=1024)
    try:
        with pytest.raises(CorruptRecordError, match=rf"^{seg_path.name}: batch at {positions[3]}: CRC mismatch"):
            list(seg.scan(positions[1], validate=True))
    finally:
        seg.close()
