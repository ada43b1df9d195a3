"""A truncation closes the files of the segments it removes (a follower truncating often used to
keep every cut segment's descriptors open until a cleaner swap: 50 truncations, 11 -> 284)."""

from __future__ import annotations

import os

from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_batch

NOW = 1_700_000_000_000


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _append(log: UnifiedLog, count: int) -> None:
    for _ in range(count):
        log.append(build_batch([(None, b"x" * 100, (), NOW)]), now_ms=NOW)


def test_fifty_truncations_into_earlier_segments_leave_no_descriptor_open(tmp_path):
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)  # one batch a segment
    try:
        _append(log, 10)
        assert len(log.segments) == 10
        before = _open_descriptors()
        for _ in range(50):
            log.truncate_to(5)  # cuts into the segment at 5 and deletes the five after it
            assert log.log_end_offset == 5
            _append(log, 5)
        assert len(log.segments) == 10
        assert _open_descriptors() == before
    finally:
        log.close()


def test_a_segment_closed_by_a_truncation_still_tells_its_modification_time(tmp_path):
    """The cleaner's thread may still hold a segment a truncation took out of the log."""
    log = UnifiedLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=NOW)
    try:
        _append(log, 3)
        old = log.segments[1]
        log.truncate_to(1)  # cut to nothing, and reopened as a new segment of the log
        assert old.fd == -1 and old not in log.segments
        assert old.last_modified_ms == int(os.stat(old.log_path).st_mtime * 1000)  # the file as it was cut
    finally:
        log.close()
