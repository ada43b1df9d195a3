"""Reading segment files without opening the log: order, control batches, torn tails, log end."""

from __future__ import annotations

import threading

from tidemark.log import LogConfig, UnifiedLog, direct_read
from tidemark.log.cleaner import Cleaner
from tidemark.log.direct_read import (
    iter_log_records,
    log_end_offset,
    segment_files,
    topic_partition_dirs,
)
from tidemark.records import build_batch

from .test_cleaner import compact_config, read_all, write

NOW = 1_700_000_000_000


def test_records_of_a_rolled_log_in_offset_order_without_control_batches(open_log, tmp_path):
    log = open_log(LogConfig(segment_bytes=200))
    for i in range(6):
        log.append(build_batch([(b"k%d" % i, b"v%d" % i, (), NOW + i)]), now_ms=NOW)
    log.flush()
    directory = tmp_path / "topic-0"
    segments = segment_files(directory)
    assert len(segments) > 1
    # A transaction marker (only the broker writes those) and one more record, at the end.
    with segments[-1].open("ab") as f:
        f.write(build_batch([(b"\x00\x00\x00\x01", b"\x00" * 6, (), NOW)], base_offset=6, is_control=True))
        f.write(build_batch([(b"last", None, (), NOW + 9)], base_offset=7))
    records = list(iter_log_records(directory))
    assert records == [(i, NOW + i, b"k%d" % i, b"v%d" % i) for i in range(6)] + [(7, NOW + 9, b"last", None)]
    assert log_end_offset(directory) == 8


def test_torn_tail_ends_the_read_with_a_warning(tmp_path):
    directory = tmp_path / "t-3"
    directory.mkdir()
    first = build_batch([(b"a", b"1", (), NOW)], base_offset=0)
    second = build_batch([(b"b", b"2", (), NOW)], base_offset=1)
    (directory / "00000000000000000000.log").write_bytes(first + second[:20])
    (directory / "00000000000000000000.log.cleaned").write_bytes(second)
    warnings: list[str] = []
    assert [key for _, _, key, _ in iter_log_records(directory, warn=warnings.append)] == [b"a"]
    assert warnings == ["t-3/00000000000000000000.log: 20 bytes after the last complete batch ignored"]
    assert log_end_offset(directory) == 1


def test_partition_dirs_and_empty_logs(tmp_path):
    for name in ("t-10", "t-2", "t-x", "t-1.abc-delete", "tt-0"):
        (tmp_path / name).mkdir()
    (tmp_path / "t-5").write_text("not a directory")
    assert [p for p, _ in topic_partition_dirs(tmp_path, "t")] == [2, 10]
    assert log_end_offset(tmp_path / "t-2") == 0
    (tmp_path / "t-2" / "00000000000000000042.log").write_bytes(b"")
    assert log_end_offset(tmp_path / "t-2") == 42
    assert list(iter_log_records(tmp_path / "t-2")) == []


def _cleanable_log(directory):
    log = UnifiedLog.open(directory, compact_config(), now_ms=NOW)
    for i in range(300):
        write(log, [(b"k%d" % (i % 7), b"value-%d" % i)])
    log.flush()
    assert len(log.segments) > 4
    return log


def _records(log):
    return [(r.offset, r.timestamp, r.key, r.value) for r in read_all(log)]


def test_listing_that_catches_a_swap_half_done_is_taken_again(tmp_path, monkeypatch):
    """The cleaner has renamed the old segments away but not yet the cleaned one in: a listing
    at that moment has no file for the range. The reader must list again, not skip it."""
    log = _cleanable_log(tmp_path / "t-0")
    in_window, release = threading.Event(), threading.Event()

    def swap_hook(step):
        if step == "deleted" and not in_window.is_set():
            in_window.set()
            assert release.wait(60)

    log.swap_hook = swap_hook
    cleaner = threading.Thread(target=Cleaner().clean, args=(log, 0))
    cleaner.start()
    try:
        assert in_window.wait(60)
        listings = []

        def listed(directory, names):
            listings.append(names)
            if len(listings) == 1:  # the swap goes on (and the cleaning ends) after this listing
                release.set()
                cleaner.join(60)

        monkeypatch.setattr(direct_read, "listing_hook", listed)
        records = list(iter_log_records(tmp_path / "t-0"))
    finally:
        release.set()
        cleaner.join(60)
    assert "00000000000000000000.log" not in listings[0] and len(listings) > 1
    assert records == _records(log)
    log.close()


def test_segments_swapped_between_listing_and_reading_are_read_again(tmp_path, monkeypatch):
    log = _cleanable_log(tmp_path / "t-0")
    before = _records(log)
    listings = []

    def listed(directory, names):
        listings.append(names)
        if len(listings) == 1:  # the old segments are cleaned into one: their names vanish
            log.config = compact_config(segment_bytes=1 << 20)
            Cleaner().clean(log, 0)

    monkeypatch.setattr(direct_read, "listing_hook", listed)
    records = list(iter_log_records(tmp_path / "t-0"))
    assert len(listings) > 1 and len(records) < len(before)
    assert records == _records(log)
    log.close()
