"""The cleaner's disk I/O: a cleaned segment goes to the disk in steps while it is written and
its files' write-back starts before their fsyncs; a crash in the middle of that leaves the log
as it was; the worker process runs at a lower CPU and I/O priority than the broker."""

from __future__ import annotations

import os
import shutil
import threading
import time

import pytest

from tidemark.log import UnifiedLog
from tidemark.log import cleaner as cleaner_module
from tidemark.log.cleaner import SYNC_FILE_RANGE_WAIT_AFTER, SYNC_FILE_RANGE_WRITE, Cleaner, Throttler
from tidemark.log.cleaner_worker import (WORKER_IOPRIO, WORKER_NICE, CleanerWorker, ioprio, make_job, run_job,
                                         swap_in)

from .conftest import NOW
from .test_cleaner import compact_config, latest, read_all, write

needs_sync_file_range = pytest.mark.skipif(cleaner_module._SYNC_RANGE is None, reason="Linux only")


def _dirty_log(directory) -> UnifiedLog:
    log = UnifiedLog.open(directory, compact_config(), now_ms=NOW)
    for i in range(300):
        # a key overwritten, one kept (the cleaned segments have bytes to write), a tombstone
        write(log, [(b"k%d" % (i % 7), b"value-%d" % i), (b"u%d" % i, b"kept"), (b"j%d" % (i % 5), None if i % 3 == 0 else b"x")])
    log.flush()
    return log


def _path(fd: int) -> str:
    return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))


class _Recorder:
    """Records each sync_file_range and fsync by file name, in order; calls the real ones."""

    def __init__(self, monkeypatch, on_write_back=None):
        self.calls: list[tuple] = []
        self.on_write_back = on_write_back
        real_range, real_fsync = cleaner_module._SYNC_RANGE, os.fsync

        def sync_range(fd, offset, nbytes, flags):
            self.calls.append(("range", _path(fd), offset, nbytes, flags))
            if self.on_write_back is not None:
                self.on_write_back()
            real_range(fd, offset, nbytes, flags)

        def fsync(fd):
            self.calls.append(("fsync", _path(fd)))
            real_fsync(fd)

        monkeypatch.setattr(cleaner_module, "_SYNC_RANGE", sync_range)
        monkeypatch.setattr(os, "fsync", fsync)


@needs_sync_file_range
def test_a_cleaned_segment_is_written_back_in_steps_and_before_its_fsyncs(tmp_path, monkeypatch):
    monkeypatch.setattr(cleaner_module, "_WRITE_CHUNK", 1)  # a write per batch
    monkeypatch.setattr(cleaner_module, "WRITE_BACK_BYTES", 100)
    log = _dirty_log(tmp_path / "t-0")
    want = latest(read_all(log))
    recorder = _Recorder(monkeypatch)
    Cleaner().clean(log, 0)
    assert latest(read_all(log)) == want

    cleaned_logs = sorted({c[1] for c in recorder.calls if c[1].endswith(".log.cleaned")})
    assert cleaned_logs
    for name in cleaned_logs:
        calls = [c for c in recorder.calls if c[1] == name]
        steps = [c for c in calls if c[0] == "range" and c[3] > 0]
        # Contiguous steps from the start of the file, one in flight: each waited for before the next.
        started = [c for c in steps if c[4] == SYNC_FILE_RANGE_WRITE]
        assert started and started[0][2] == 0
        assert all(a[2] + a[3] == b[2] for a, b in zip(started, started[1:]))
        waited = [c[2:4] for c in steps if c[4] & SYNC_FILE_RANGE_WAIT_AFTER]
        assert waited == [c[2:4] for c in started[:-1]]
        # The whole file's write-back is started before the first fsync of the segment's files.
        base = name[: -len(".log.cleaned")]
        first_fsync = next(i for i, c in enumerate(recorder.calls) if c[0] == "fsync" and c[1].startswith(base))
        before = recorder.calls[:first_fsync]
        for suffix in (".log.cleaned", ".index.cleaned", ".timeindex.cleaned"):
            assert ("range", base + suffix, 0, 0, SYNC_FILE_RANGE_WRITE) in before
    log.close()


@needs_sync_file_range
@pytest.mark.parametrize("crash_at", [1, 3, 6])
def test_a_crash_during_write_back_leaves_the_old_segments_intact(tmp_path, monkeypatch, crash_at):
    """The files on disk at the moment of the crash_at-th write-back (what a process killed
    then leaves behind) load as the log before the cleaning: every record, no leftovers."""
    monkeypatch.setattr(cleaner_module, "_WRITE_CHUNK", 1)
    monkeypatch.setattr(cleaner_module, "WRITE_BACK_BYTES", 100)
    log = _dirty_log(tmp_path / "t-0")
    before = read_all(log)
    crashed = tmp_path / "crashed" / "t-0"
    count = [0]

    def snapshot():
        count[0] += 1
        if count[0] == crash_at:
            shutil.copytree(log.directory, crashed)

    _Recorder(monkeypatch, on_write_back=snapshot)
    Cleaner().clean(log, 0)
    log.close()
    assert crashed.exists()
    writing = [n for n in os.listdir(crashed) if n.endswith(".log.cleaned")]  # caught while writing one
    assert len(writing) == 1
    base = int(writing[0].split(".")[0])

    reopened = UnifiedLog.open(crashed, compact_config(), now_ms=NOW)
    try:
        after = read_all(reopened)
        assert latest(after) == latest(before)
        # the segments the interrupted group was replacing, and all after them, as they were
        assert [r for r in after if r.offset >= base] == [r for r in before if r.offset >= base]
        assert not [n for n in os.listdir(crashed) if n.endswith((".cleaned", ".swap", ".deleted"))]
    finally:
        reopened.close()


def test_the_worker_runs_at_a_lower_cpu_and_io_priority_and_sched_idle(tmp_path):
    log = _dirty_log(tmp_path / "t-0")
    made = make_job(log, 0, int(time.time() * 1000), 1 << 20)
    assert made is not None
    job, _ = made
    worker = CleanerWorker(float("inf"))
    worker.start()
    try:
        worker.run(job, lambda old, base: None)  # done: the worker set its priorities before it
        pid = worker.process.pid
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE)
        if ioprio() is not None:  # a machine whose ioprio syscalls this knows
            assert ioprio(pid) == WORKER_IOPRIO
        if hasattr(os, "SCHED_IDLE"):  # Linux: it runs only on a core nothing else wants
            assert os.sched_getscheduler(pid) == os.SCHED_IDLE
    finally:
        worker.stop()
        log.close()


def test_a_leftover_cleaned_segment_is_not_appended_to(tmp_path):
    """A worker killed mid-group leaves "<base>.log.cleaned" behind: the next job starts that
    group's cleaned segment from nothing, not after the leftover's bytes."""
    log = _dirty_log(tmp_path / "t-0")
    want = latest(read_all(log))
    job, old = make_job(log, 0, int(time.time() * 1000), 1 << 20)
    leftover = log.directory / (log.segments[0].log_path.name + ".cleaned")
    leftover.write_bytes(b"\x00" * 100 + b"a torn batch of an earlier attempt")
    by_base = {seg.base_offset: seg for seg in old}
    swapped = []

    def send(message):
        if message[0] == "group":
            swapped.append(swap_in(log, job, [by_base[b] for b in message[1]], message[2]))

    run_job(job, send, threading.Event(), Throttler())
    assert swapped and all(swapped)
    assert latest(read_all(log)) == want
    log.close()


def test_a_crc_failure_below_first_dirty_still_stops_the_cleaning(tmp_path):
    """The copy pass skips the CRCs only of segments the offset map read: a bad batch in the
    clean head (below the first dirty offset, never mapped) is still never copied."""
    from tidemark.records import CorruptRecordError

    from .test_cleaner import _corrupt_value_byte, _files

    log = _dirty_log(tmp_path / "t-0")
    try:
        _corrupt_value_byte(log)  # in the second segment
        damaged = log.segments[1].log_path.name
        first_dirty = log.segments[3].base_offset
        before = _files(log.directory)
        with pytest.raises(CorruptRecordError, match=damaged):
            Cleaner().clean(log, first_dirty)
        assert _files(log.directory)[damaged] == before[damaged]  # (the first segment's group was cleaned)
    finally:
        log.close()
