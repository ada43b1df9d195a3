"""The log cleaner: latest value per key, original offsets, tombstone retention, concurrency
with appends and reads, crash safety of the swap, and a large offsets-like log."""

from __future__ import annotations

import os
import threading
import time

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.log import LogConfig, UnifiedLog
from tidemark.log.config import CleanerConfig
from tidemark.log.cleaner import Cleaner, LogCleanerManager, Throttler, log_to_clean
from tidemark.log.manager import LogManager, read_checkpoint
from tidemark.records import build_batch, decode_records, iter_batches
from tidemark.records.compression import CompressionType

from .conftest import NOW

DAY = 86400000


def compact_config(**kw) -> LogConfig:
    return LogConfig(**{"cleanup_policy": "compact", "segment_bytes": 2048, "index_interval_bytes": 256, **kw})


def write(log: UnifiedLog, records, *, compression=CompressionType.NONE, now=NOW) -> None:
    """records: (key, value) pairs, one batch."""
    log.append(build_batch([(k, v, (), now) for k, v in records], compression=compression), now_ms=now)
    log.update_high_watermark(log.log_end_offset)


def read_all(log: UnifiedLog) -> list:
    records = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for pos, h in iter_batches(data):
            records += [r for r in decode_records(data, pos) if r.offset >= offset]
            offset = h.next_offset
    return records


def latest(records) -> dict:
    out = {}
    for r in records:
        out[r.key] = r.value
    return out


def model_latest(writes) -> dict:
    out = {}
    for k, v in writes:
        out[k] = v
    return out


def check_cleaned(before: list, after: list, *, tombstones_kept: bool, upto: int) -> None:
    offsets = [r.offset for r in after]
    assert offsets == sorted(set(offsets))
    by_offset = {r.offset: r for r in before}
    for r in after:
        assert by_offset[r.offset] == r  # each kept record at its original offset, unchanged
    want = {k: v for k, v in latest(before).items() if v is not None or tombstones_kept}
    assert {k: v for k, v in latest(after).items() if v is not None or tombstones_kept} == want
    cleaned = [r for r in after if r.offset < upto]
    last = {}
    for r in before:
        if r.offset < upto:  # the active segment is not in the map
            last[r.key] = r.offset
    for r in cleaned:  # below the cleaned end, only each key's last record remains
        assert last[r.key] == r.offset
        assert tombstones_kept or r.value is not None


keys = st.sampled_from([b"k%d" % i for i in range(12)])
values = st.one_of(st.none(), st.binary(min_size=1, max_size=40))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.tuples(keys, values), min_size=1, max_size=8), min_size=1, max_size=40),
       compressed=st.booleans(), expire=st.booleans())
def test_clean_keeps_latest_value_per_key(tmp_path_factory, batches, compressed, expire):
    log = UnifiedLog.open(tmp_path_factory.mktemp("c") / "t-0", compact_config(), now_ms=NOW)
    try:
        for b in batches:
            write(log, b, compression=CompressionType.GZIP if compressed else CompressionType.NONE)
        before = read_all(log)
        end_before, hw_before = log.log_end_offset, log.high_watermark
        clock = (lambda: int(time.time() * 1000) + 2 * DAY) if expire else (lambda: int(time.time() * 1000))
        end, stats = Cleaner(clock=clock).clean(log, 0)
        assert end == log.active_segment.base_offset
        after = read_all(log)
        assert (log.log_end_offset, log.high_watermark) == (end_before, hw_before)
        check_cleaned(before, after, tombstones_kept=not expire, upto=end)
        # the active segment is untouched
        assert [r for r in after if r.offset >= end] == [r for r in before if r.offset >= end]
        # and the log reopens to the same content
        log.close()
        log = UnifiedLog.open(log.directory, compact_config(), now_ms=NOW)
        assert read_all(log) == after
    finally:
        log.close()


def test_tombstone_retention_follows_segment_mtime(open_log):
    log = open_log(compact_config())
    write(log, [(b"a", b"1"), (b"b", b"1")])
    write(log, [(b"a", None)])
    log.append(build_batch([(b"c", b"x" * 1900, (), NOW)]), now_ms=NOW)  # rolls
    write(log, [(b"d", b"1")])
    log.update_high_watermark(log.log_end_offset)
    real_now = int(time.time() * 1000)
    Cleaner(clock=lambda: real_now).clean(log, 0)
    assert {r.key: r.value for r in read_all(log)} == {b"a": None, b"b": b"1", b"c": b"x" * 1900, b"d": b"1"}
    Cleaner(clock=lambda: real_now + DAY + 60_000).clean(log, 0)
    assert {r.key: r.value for r in read_all(log)} == {b"b": b"1", b"c": b"x" * 1900, b"d": b"1"}


def test_min_compaction_lag_and_high_watermark_bound_the_cleanable_range(open_log):
    log = open_log(compact_config(min_compaction_lag_ms=1000))
    for i in range(60):
        write(log, [(b"k", b"%d" % i * 20)], now=NOW + i * 100)
    segs = log.segments
    assert len(segs) > 3
    ltc = log_to_clean(("t", 0), log, None, NOW + 2000)
    # segments holding records newer than now - lag are not cleanable
    assert ltc.first_uncleanable_offset < log.active_segment.base_offset
    log.update_high_watermark(segs[1].next_offset)
    assert log_to_clean(("t", 0), log, None, NOW + 10**9).first_uncleanable_offset == segs[1].next_offset


def test_dirty_ratio_and_checkpoint(tmp_path):
    manager = LogManager(tmp_path, compact_config())
    manager.open()
    log = manager.get_or_create("t", 0)
    other = manager.get_or_create("plain", 0, LogConfig(segment_bytes=2048))
    for i in range(100):
        write(log, [(b"k%d" % (i % 3), b"v" * 30)])
        write(other, [(b"k", b"v" * 30)])
    cm = LogCleanerManager(tmp_path, manager.logs)
    ltc = cm.grab_filthiest_log(NOW)
    assert ltc is not None and ltc.tp == ("t", 0) and ltc.dirty_ratio == 1.0
    end, _ = Cleaner().clean(log, ltc.first_dirty_offset)
    cm.done_cleaning(ltc.tp, end)
    assert read_checkpoint(tmp_path / "cleaner-offset-checkpoint") == {("t", 0): end}
    again = log_to_clean(("t", 0), log, end, NOW)
    assert again.dirty_bytes == 0 and again.dirty_ratio == 0.0
    assert cm.grab_filthiest_log(NOW) is None
    assert LogCleanerManager(tmp_path, manager.logs).checkpoints == {("t", 0): end}
    manager.close()


def test_cleaning_beside_appends_reads_flush_and_retention(open_log):
    log = open_log(compact_config(segment_bytes=4096, cleanup_policy="compact,delete", retention_bytes=10**9))
    model: dict = {}
    for i in range(1500):
        k, v = b"k%d" % (i % 50), b"v%d" % i
        write(log, [(k, v)])
        model[k] = v
    stop = threading.Event()
    errors = []

    def reader():
        try:
            while not stop.is_set():
                got = latest(read_all(log))
                assert set(got) == set(model) or len(got) >= 50
                log.flush()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    cleaner_result = []
    c = threading.Thread(target=lambda: cleaner_result.append(Cleaner().clean(log, 0)))
    c.start()
    i = 1500
    while c.is_alive() or i < 1700:
        k, v = b"k%d" % (i % 50), b"v%d" % i
        write(log, [(k, v)])
        model[k] = v
        log.delete_retention(NOW)
        i += 1
    c.join()
    stop.set()
    t.join()
    assert not errors
    assert latest(read_all(log)) == model
    assert cleaner_result[0][1].records_written < cleaner_result[0][1].records_read


def _crash_log(tmp_path, step):
    log = UnifiedLog.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    for i in range(300):
        write(log, [(b"k%d" % (i % 7), b"value-%d" % i), (b"j%d" % (i % 5), None if i % 3 == 0 else b"x")])
    log.flush()
    want = latest(read_all(log))

    class Crash(Exception):
        pass

    def hook(s):
        if s == step:
            raise Crash(s)

    log.swap_hook = hook
    if step is None:
        Cleaner().clean(log, 0)
    else:
        with pytest.raises(Crash):
            Cleaner().clean(log, 0)
    # the process dies: descriptors go away, nothing else happens
    for seg in log.segments:
        seg.close()
    log.local._closed = True
    return want


@pytest.mark.parametrize("step", ["cleaned", "swap", "deleted", "renamed", None])
def test_crash_at_each_step_of_the_swap(tmp_path, step):
    want = _crash_log(tmp_path, step)
    reopened = UnifiedLog.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    try:
        assert latest(read_all(reopened)) == want
        names = os.listdir(tmp_path / "t-0")
        assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
        # cleaning the recovered log still converges
        Cleaner().clean(reopened, 0)
        assert latest(read_all(reopened)) == want
    finally:
        reopened.close()


def test_leftover_cleaned_and_swap_files_are_recovered(tmp_path):
    """A crash between the rename to .swap and the deletion of the old segments leaves both;
    a crash while writing leaves a partial .cleaned: recovery completes one, drops the other."""
    want = _crash_log(tmp_path, "swap")
    d = tmp_path / "t-0"
    (d / "00000000000000000000.log.cleaned").write_bytes(b"partial garbage")
    (d / "00000000000000099999.index.swap").write_bytes(b"")
    reopened = UnifiedLog.open(d, compact_config(), now_ms=NOW)
    try:
        assert latest(read_all(reopened)) == want
        assert not [n for n in os.listdir(d) if n.endswith((".cleaned", ".swap", ".deleted"))]
    finally:
        reopened.close()


def test_throttler_sleeps_to_the_rate():
    t = [0.0]
    slept = []
    th = Throttler(1000, clock=lambda: t[0], sleep=lambda s: (slept.append(s), t.__setitem__(0, t[0] + s)))
    t[0] = 0.5
    th.maybe_throttle(2000)  # 2 s worth of bytes after 0.5 s
    assert slept == [pytest.approx(1.5)]


def test_large_offsets_like_log(tmp_path, capsys):
    """1,000,000 records over 1,000 keys, as an offsets topic sees them."""
    config = compact_config(segment_bytes=8 << 20, index_interval_bytes=4096)
    log = UnifiedLog.open(tmp_path / "__consumer_offsets-0", config, now_ms=NOW)
    try:
        value = b"\x00\x03" + b"\x00" * 40
        n, per_batch = 1_000_000, 500
        keys = [b"\x00\x01group-%04d-topic-partition" % k for k in range(1000)]
        for start in range(0, n, per_batch):
            log.append(build_batch([(keys[i % 1000], value, (), NOW) for i in range(start, start + per_batch)]),
                       now_ms=NOW)
        log.append(build_batch([(keys[0], value, (), NOW)]), now_ms=NOW)
        log.update_high_watermark(log.log_end_offset)
        # roll so nearly everything is cleanable
        with log.local.lock:
            log.local._roll(log.log_end_offset)
        write(log, [(keys[1], value)])
        size = log.size_in_bytes
        t0 = time.perf_counter()
        end, stats = Cleaner().clean(log, 0)
        elapsed = time.perf_counter() - t0
        live = [r for r in read_all(log) if r.offset < end]
        assert len(live) == 1000
        assert stats.records_read == n + 1
        with capsys.disabled():
            print(f"\ncleaned {stats.records_read} records / {size / 1e6:.1f} MB in {elapsed:.2f} s: "
                  f"{size / 1e6 / elapsed:.1f} MB/s, {stats.records_read / elapsed:,.0f} records/s; "
                  f"{log.size_in_bytes} bytes left in {len(log.segments)} segments")
    finally:
        log.close()


def test_background_cleaner_cleans_by_itself(tmp_path):
    """Started by the LogManager, the cleaner task alone finds dirty logs and cleans them, pass
    after pass (each cleaning is waited on as it finishes, no clean_once call)."""
    import asyncio

    from tidemark.log import log_cleaner

    manager = LogManager(tmp_path, compact_config(), cleaner_config=CleanerConfig(backoff_ms=10))
    manager.open()
    log = manager.get_or_create("__consumer_offsets", 0)
    want = {}

    def produce(start):
        for i in range(start, start + 200):
            write(log, [(b"k%d" % (i % 4), b"v%d" % i)])
            want[b"k%d" % (i % 4)] = b"v%d" % i

    async def main():
        cleanings: asyncio.Queue = asyncio.Queue()
        produce(0)
        manager.start()
        cleaner_manager = manager.cleaner.manager
        done_cleaning = cleaner_manager.done_cleaning

        def spy(tp, end):
            done_cleaning(tp, end)
            cleanings.put_nowait((tp, end))

        cleaner_manager.done_cleaning = spy
        try:
            for start in (200, 400):  # two passes: the loop goes on after a cleaning
                tp, end = await asyncio.wait_for(cleanings.get(), timeout=60)
                assert tp == ("__consumer_offsets", 0) and end is not None
                produce(start)
            tp, end = await asyncio.wait_for(cleanings.get(), timeout=60)
        finally:
            await manager.stop()
        return end

    before = log_cleaner.SEGMENTS_CLEANED._value.get()
    end = asyncio.run(main())
    assert log_cleaner.SEGMENTS_CLEANED._value.get() > before
    assert latest(read_all(log)) == want
    below = [r.key for r in read_all(log) if r.offset < end]
    assert sorted(below) == sorted(set(below))  # one record per key left below the cleaned end
    assert log_cleaner.DIRTY_RATIO.labels("__consumer_offsets", "0")._value.get() < 0.5
    assert read_checkpoint(tmp_path / "cleaner-offset-checkpoint")[("__consumer_offsets", 0)] == end
    manager.close()


# -- unreadable batches -----------------------------------------------------------------------


def _log_with_segments(directory, config=None):
    log = UnifiedLog.open(directory, config or compact_config(), now_ms=NOW)
    for i in range(120):
        write(log, [(b"k%d" % (i % 5), b"value-%d" % i)])
    assert len(log.segments) > 3
    return log


def _batch_positions(path):
    data = path.read_bytes()
    return [pos for pos, _ in iter_batches(data, validate=False)]


def _files(directory) -> dict:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _corrupt_value_byte(log):
    """Flip the last byte (inside a record's value) of the third batch of the second segment."""
    path = log.segments[1].log_path
    pos = _batch_positions(path)[3]
    data = bytearray(path.read_bytes())
    end = pos + int.from_bytes(data[pos + 8: pos + 12], "big") + 12
    data[end - 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _break_header(log):
    """Zero the length of the third batch of the first segment: nothing after it can be framed."""
    path = log.segments[0].log_path
    pos = _batch_positions(path)[2]
    with open(path, "r+b") as f:
        f.seek(pos + 8)
        f.write(b"\x00\x00\x00\x00")


@pytest.mark.parametrize("damage", [_corrupt_value_byte, _break_header])
def test_unreadable_batch_aborts_the_cleaning_and_leaves_the_files(tmp_path, damage):
    """A batch failing its CRC is never copied (not even rewritten under a fresh CRC), and an
    unreadable header never ends a segment early (the swap would drop everything after it)."""
    from tidemark.records import CorruptRecordError

    log = _log_with_segments(tmp_path / "t-0")
    try:
        damage(log)
        before = _files(log.directory)
        with pytest.raises(CorruptRecordError, match=r"\.log: "):
            Cleaner().clean(log, 0)
        assert _files(log.directory) == before
    finally:
        log.close()


def test_uncleanable_log_is_reported_once_and_skipped_while_others_are_cleaned(tmp_path):
    import asyncio

    from structlog.testing import capture_logs

    from tidemark.log import log_cleaner

    manager = LogManager(tmp_path, compact_config())
    manager.open()
    bad = manager.get_or_create("bad", 0)
    good = manager.get_or_create("good", 0)
    for log in (bad, good):
        for i in range(120):
            write(log, [(b"k%d" % (i % 5), b"value-%d" % i)])
    _corrupt_value_byte(bad)
    bad_files = _files(bad.directory)
    task = log_cleaner.LogCleaner(tmp_path, manager.logs, CleanerConfig())

    async def passes():
        return [await task.clean_once() for _ in range(3)]

    with capture_logs() as events:
        assert asyncio.run(passes()) == [False, True, False]  # bad fails, good is cleaned, nothing left
    failed = [e for e in events if e["event"] == "log_uncleanable"]
    assert len(failed) == 1 and failed[0]["topic"] == "bad" and "CRC" in failed[0]["error"]
    assert [e["topic"] for e in events if e["event"] == "log_cleaned"] == ["good"]
    assert log_cleaner.UNCLEANABLE_PARTITIONS._value.get() == 1
    assert _files(bad.directory) == bad_files
    assert ("bad", 0) not in read_checkpoint(tmp_path / "cleaner-offset-checkpoint")
    # a partition deleted and created again is a new log: cleaned again
    manager.delete_partition("bad", 0)
    task.update_dirty_ratios()
    assert log_cleaner.UNCLEANABLE_PARTITIONS._value.get() == 0
    manager.close()


def test_batch_whose_records_do_not_fill_it_aborts_the_cleaning(tmp_path):
    """A batch with a valid CRC whose records section holds more than its records count says
    (here: a one-record batch rewritten to claim none) is refused, not copied minus its tail."""
    from tidemark.records import CorruptRecordError

    log = _log_with_segments(tmp_path / "t-0")
    try:
        path = log.segments[0].log_path
        pos = _batch_positions(path)[3]
        data = bytearray(path.read_bytes())
        data[pos + 57: pos + 61] = (0).to_bytes(4, "big")  # records count 0, last offset delta 0
        end = pos + int.from_bytes(data[pos + 8: pos + 12], "big") + 12
        data[pos + 17: pos + 21] = crc32c(bytes(data[pos + 21: end])).to_bytes(4, "big")
        path.write_bytes(bytes(data))
        before = _files(log.directory)
        with pytest.raises(CorruptRecordError, match=rf"{path.name}: batch at {pos}: \d+ bytes after"):
            Cleaner().clean(log, 0)
        assert _files(log.directory) == before
    finally:
        log.close()


def test_a_log_truncated_while_cleaning_in_process_gets_nothing_swapped_in(tmp_path):
    """The in-process Cleaner refuses its swaps as the worker's do: a truncation after the offset
    map was built removes the newest segments (and so the newest value of every key); the map
    still points at those, so no cleaned segment may replace the older ones, or the values the
    truncation left would be dropped."""
    log = UnifiedLog.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    for i in range(200):
        write(log, [(b"k%d" % (i % 5), b"value-%d" % i)])
    assert len(log.segments) > 6
    truncated: list = []

    class TruncatedMeanwhile(Cleaner):
        def _clean_group(self, *args, **kwargs):
            if not truncated:  # the map is built; a follower truncates before the first swap
                log.truncate_to(log.segments[-4].base_offset)
                log.update_high_watermark(log.log_end_offset)
                truncated.append(read_all(log))
            return super()._clean_group(*args, **kwargs)

    try:
        end, _ = TruncatedMeanwhile().clean(log, 0)
        assert truncated
        assert read_all(log) == truncated[0]  # every record the truncation left is still there
        assert latest(read_all(log)) == latest(truncated[0])
        assert end == 0
        assert not [p for p in os.listdir(log.directory) if p.endswith((".cleaned", ".swap"))]
    finally:
        log.close()


def test_a_rebuilt_batch_has_the_max_timestamp_of_its_kept_records_even_before_its_first(tmp_path):
    """A batch whose kept record is older than its first record (a producer may stamp records out
    of order): the rebuilt batch's max timestamp is that record's, as Kafka's cleaner computes it,
    not one below the batch's base timestamp."""
    log = UnifiedLog.open(tmp_path / "t-0", compact_config(), now_ms=NOW)
    try:
        log.append(build_batch([(b"newer", b"1", (), NOW + 10), (b"older", b"2", (), NOW)]), now_ms=NOW)
        for i in range(40):  # "newer" overwritten; rolls the first segment
            write(log, [(b"newer", b"value-%d" % i)])
        Cleaner(clock=lambda: NOW).clean(log, 0)
        data = log.read(0, 1 << 20)
        _, first = next(iter_batches(data))
        assert [(r.key, r.timestamp) for r in decode_records(data)] == [(b"older", NOW)]
        assert (first.base_timestamp, first.max_timestamp) == (NOW + 10, NOW)
    finally:
        log.close()
