import os
from pathlib import Path

import pytest

from tidemark.log import LogConfig, LogManager
from tidemark.log.errors import DataDirLockedError
from tidemark.log.manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    parse_partition_dir,
    read_checkpoint,
)

from .conftest import NOW, batch


def test_parse_partition_dir():
    assert parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_partition_dir("__consumer_offsets-0") == ("__consumer_offsets", 0)
    assert parse_partition_dir("nodash") is None
    assert parse_partition_dir("topic-x") is None
    assert parse_partition_dir("-3") is None


def test_checkpoints_and_clean_shutdown_round_trip(tmp_path):
    config = LogConfig(segment_bytes=200)
    m = LogManager(tmp_path, config)
    m.open()
    assert not m.clean_shutdown
    a = m.get_or_create("a-b", 0)
    c = m.get_or_create("c", 3)
    assert m.get_or_create("a-b", 0) is a and m.get("zzz", 0) is None
    for _ in range(6):
        a.append(batch(1, size=40), now_ms=NOW)
    c.append(batch(3), now_ms=NOW)
    a.update_high_watermark(a.log_end_offset)
    a.config = LogConfig(segment_bytes=200, retention_ms=0)
    assert a.delete_retention(NOW + 10**6) > 0
    start = a.log_start_offset
    m.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / RECOVERY_POINT_CHECKPOINT).read_text() == "0\n2\na-b 0 6\nc 3 3\n"
    assert read_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {("a-b", 0): start, ("c", 3): 0}

    (tmp_path / "not-a-partition").mkdir()
    (tmp_path / "x-1.0123abcd-delete").mkdir()
    m = LogManager(tmp_path, config)
    m.open()
    assert m.clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from here is unclean
    assert not (tmp_path / "x-1.0123abcd-delete").exists()
    assert set(m.logs()) == {("a-b", 0), ("c", 3)}
    a = m.get("a-b", 0)
    assert (a.log_start_offset, a.log_end_offset, a.recovery_point) == (start, 6, 6)
    m.checkpoint()
    m._dir_lock.release()  # the process dies without close(): the kernel drops its lock
    m2 = LogManager(tmp_path, config)
    m2.open()
    assert not m2.clean_shutdown
    assert m2.get("a-b", 0).log_start_offset == start
    for log in m.logs().values():
        log.close()
    for log in m2.logs().values():
        log.close()


def test_delete_partition(tmp_path):
    m = LogManager(tmp_path, LogConfig())
    m.open()
    log = m.get_or_create("t", 0)
    log.append(batch(), now_ms=NOW)
    m.delete_partition("t", 0)
    assert m.get("t", 0) is None
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]  # the partition directory is gone
    m.close()
    assert read_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {}


def test_one_log_manager_per_data_directory(tmp_path):
    first = LogManager(tmp_path / "data", LogConfig())
    first.open()
    second = LogManager(tmp_path / "data", LogConfig())
    with pytest.raises(DataDirLockedError, match=f"data directory {tmp_path / 'data'} is in use"):
        second.open()
    assert second.logs() == {}
    first.close()  # releases the lock
    second.open()
    second.close()


def test_clean_shutdown_marker_removal_and_checkpoints_are_durable(tmp_path, monkeypatch):
    """The marker's removal at start is fsynced (directory) before open() returns; checkpoint
    files are fsynced, then renamed into place, then their directory fsynced."""
    from tidemark.log import checkpoint, manager

    m = LogManager(tmp_path, LogConfig())
    m.open()
    m.get_or_create("t", 0).append(batch(), now_ms=NOW)
    m.close()
    marker = tmp_path / CLEAN_SHUTDOWN_FILE
    events = []
    monkeypatch.setattr(manager, "fsync_directory",
                        lambda d: events.append(("fsync dir", d.name, marker.exists())))
    m = LogManager(tmp_path, LogConfig())
    m.open()
    assert ("fsync dir", tmp_path.name, False) in events  # after the marker was gone

    real_fsync, real_replace = os.fsync, os.replace
    events.clear()
    monkeypatch.setattr(checkpoint, "fsync_directory", lambda d: events.append(("fsync dir", d.name)))
    monkeypatch.setattr(checkpoint.os, "fsync", lambda fd: (events.append(("fsync file",)), real_fsync(fd)))
    monkeypatch.setattr(checkpoint.os, "replace",
                        lambda a, b: (events.append(("rename", Path(b).name)), real_replace(a, b)))
    m.checkpoint()
    assert events == [("fsync file",), ("rename", RECOVERY_POINT_CHECKPOINT), ("fsync dir", tmp_path.name),
                      ("fsync file",), ("rename", LOG_START_OFFSET_CHECKPOINT), ("fsync dir", tmp_path.name)]
    m.close()
