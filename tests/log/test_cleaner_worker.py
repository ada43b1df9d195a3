"""The log cleaner's worker process: it cleans exactly as the in-process Cleaner does, a log that
changed under its job gets nothing stale swapped in, and a worker killed mid-job is replaced
while the log stays as it was."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tidemark.hold import HOLD_AT, HOLD_RELEASE
from tidemark.log import UnifiedLog
from tidemark.log import log_cleaner
from tidemark.log.cleaner import Cleaner
from tidemark.log.cleaner_worker import CleanerWorker, _SharedRateThrottler
from tidemark.log.config import CleanerConfig
from tidemark.log.manager import LogManager, read_checkpoint

from .test_cleaner import DAY, compact_config, latest, read_all
from .test_cleaner_txn import Writer

HANG_GUARD_S = 60
CLEANED_FILES = (".log", ".index", ".timeindex", ".txnindex")


def _fill(log: UnifiedLog) -> None:
    """Keys overwritten across segments, tombstones, and committed and aborted transactions."""
    w = Writer(log)
    for i in range(150):
        w.plain((b"k%d" % (i % 7), b"value-%d" % i))
        if i % 25 == 3:
            w.plain((b"k%d" % (i % 7), None))
        if i % 40 == 10:
            w.txn(7, (b"k1", b"aborted-%d" % i))
            w.end(7, commit=False)
            w.txn(8, (b"k2", b"committed-%d" % i))
            w.end(8, commit=True)
    w.plain((b"last", b"x"))


def _segment_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in CLEANED_FILES}


def _manager(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir, compact_config())
    manager.open()
    return manager


async def _until(predicate) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():
        assert time.monotonic() < deadline, "hang guard"
        await asyncio.sleep(0.01)


def _cleaned_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_worker_cleaning_is_identical_to_the_in_process_cleaner(tmp_path):
    first = _manager(tmp_path / "worker")
    _fill(first.get_or_create("t", 0))
    first.close()
    shutil.copytree(tmp_path / "worker", tmp_path / "reference")  # same bytes and modification times
    clock = int(time.time() * 1000) + 2 * DAY  # past the delete horizon: tombstones and markers go

    worker_side = _manager(tmp_path / "worker")
    cleaner = log_cleaner.LogCleaner(tmp_path / "worker", worker_side.logs, CleanerConfig(), clock=lambda: clock)
    reference = _manager(tmp_path / "reference")
    ref_log = reference.get_or_create("t", 0)
    before = read_all(ref_log)

    async def clean() -> bool:
        try:
            return await cleaner.clean_once()
        finally:
            await cleaner.stop()

    assert asyncio.run(clean())
    ref_end, _ = Cleaner(clock=lambda: clock).clean(ref_log, 0)
    log = worker_side.get_or_create("t", 0)
    assert read_checkpoint(tmp_path / "worker" / "cleaner-offset-checkpoint") == {("t", 0): ref_end}
    assert read_all(log) == read_all(ref_log)
    assert len(read_all(log)) < len(before)
    worker_side.close()
    reference.close()
    cleaned = _segment_files(tmp_path / "worker" / "t-0")
    assert len([name for name in cleaned if name.endswith(".log")]) < 10
    assert cleaned == _segment_files(tmp_path / "reference" / "t-0")


def test_a_log_truncated_while_the_worker_cleans_gets_nothing_swapped_in(tmp_path, monkeypatch):
    """The worker is held after writing part of its first cleaned segment; meanwhile a follower's
    truncation removes the newest segments (and so the newest value of every key). The job's key
    map still points at those: none of its cleaned segments may be swapped in, even those whose
    own segments are untouched, or the values left after the truncation would be dropped."""
    release = tmp_path / "release"
    monkeypatch.setenv(HOLD_AT, "cleaner_write")
    monkeypatch.setenv(HOLD_RELEASE, str(release))
    manager = _manager(tmp_path / "data")
    log = manager.get_or_create("t", 0)
    _fill(log)
    cleaner = log_cleaner.LogCleaner(tmp_path / "data", manager.logs, CleanerConfig())

    async def scenario() -> tuple[bool, list]:
        try:
            task = asyncio.create_task(cleaner.clean_once())
            await _until(lambda: _cleaned_files(log.directory))
            assert len(log.segments) > 6
            log.truncate_to(log.segments[-4].base_offset)
            log.update_high_watermark(log.log_end_offset)
            truncated = read_all(log)
            release.touch()
            return await asyncio.wait_for(task, HANG_GUARD_S), truncated
        finally:
            await cleaner.stop()

    _, truncated = asyncio.run(scenario())
    assert read_all(log) == truncated  # every record the truncation left is still there
    assert _cleaned_files(log.directory) == []
    assert read_checkpoint(tmp_path / "data" / "cleaner-offset-checkpoint").get(("t", 0), 0) == 0
    manager.close()


def test_a_worker_killed_mid_job_is_restarted_and_the_log_cleaned_later(tmp_path, monkeypatch):
    monkeypatch.setenv(HOLD_AT, "cleaner_write")  # held for ever: until it is killed
    manager = _manager(tmp_path / "data")
    log = manager.get_or_create("t", 0)
    _fill(log)
    before = read_all(log)
    files = _segment_files(log.directory)
    cleaner = log_cleaner.LogCleaner(tmp_path / "data", manager.logs, CleanerConfig())

    async def scenario() -> tuple[bool, bool]:
        try:
            task = asyncio.create_task(cleaner.clean_once())
            await _until(lambda: _cleaned_files(log.directory))
            monkeypatch.delenv(HOLD_AT)  # the restarted worker is not held
            killed = cleaner.workers[0].process
            os.kill(killed.pid, signal.SIGKILL)
            abandoned = await asyncio.wait_for(task, HANG_GUARD_S)
            assert cleaner.workers[0].alive and cleaner.workers[0].process is not killed
            # the broker side kept serving: the log takes appends, and the job left no trace
            assert read_all(log) == before and _segment_files(log.directory) == files
            assert _cleaned_files(log.directory) == []
            assert ("t", 0) not in read_checkpoint(tmp_path / "data" / "cleaner-offset-checkpoint")
            return abandoned, await asyncio.wait_for(cleaner.clean_once(), HANG_GUARD_S)
        finally:
            await cleaner.stop()

    assert asyncio.run(scenario()) == (False, True)
    assert latest(read_all(log)) == {k: v for k, v in latest(before).items()}
    assert len(read_all(log)) < len(before)
    manager.close()


def test_stop_ends_a_worker_that_does_not_come_back(tmp_path, monkeypatch):
    """Shutdown is bounded: a worker stuck in its job (held for ever here) is killed."""
    monkeypatch.setenv(HOLD_AT, "cleaner_write")
    manager = _manager(tmp_path / "data")
    log = manager.get_or_create("t", 0)
    _fill(log)
    cleaner = log_cleaner.LogCleaner(tmp_path / "data", manager.logs, CleanerConfig())

    async def scenario():
        task = asyncio.create_task(cleaner.clean_once())
        await _until(lambda: _cleaned_files(log.directory))
        process = cleaner.workers[0].process
        await cleaner.stop()
        task.cancel()
        return process

    process = asyncio.run(scenario())
    assert not process.is_alive()
    manager.close()


def test_the_worker_throttles_to_the_rate_the_broker_sets():
    worker = CleanerWorker(1000.0)
    throttler = _SharedRateThrottler(worker.throttle)
    worker.rate.value = 5.0  # log.cleaner.io.max.bytes.per.second changed dynamically
    assert throttler.rate == 5.0


class _Clock:
    """One clock for the throttlers of every worker; sleeping moves it on."""

    def __init__(self) -> None:
        self.now = time.monotonic()
        self.slept: list[tuple[str, float]] = []

    def sleeper(self, name: str):
        def sleep(seconds: float) -> None:
            self.slept.append((name, seconds))
            self.now += seconds
        return sleep


def test_all_workers_together_stay_under_one_rate():
    """log.cleaner.io.max.bytes.per.second bounds the cleaner, not each worker (Kafka's cleaner
    threads share one Throttler): two workers each reading half the budget's worth of bytes
    together sleep as one cleaner reading all of it would."""
    cleaner = log_cleaner.LogCleaner(Path("unused"), dict, CleanerConfig(threads=2, io_max_bytes_per_second=1000.0))
    clock = _Clock()
    clock.now = cleaner.throttle.start
    first, second = CleanerWorker(cleaner.throttle), CleanerWorker(cleaner.throttle)  # as cleaner.worker(i) makes them
    a = _SharedRateThrottler(first.throttle, clock=lambda: clock.now, sleep=clock.sleeper("a"))
    b = _SharedRateThrottler(second.throttle, clock=lambda: clock.now, sleep=clock.sleeper("b"))
    a.maybe_throttle(500)
    clock.now += 0.2
    b.maybe_throttle(500)  # 1,000 bytes in 0.2 s: 1 s worth at 1,000 B/s
    assert clock.slept == [("b", pytest.approx(0.8))]
    a.maybe_throttle(100)  # the next period started when b woke up: not due yet
    assert len(clock.slept) == 1
    b.maybe_throttle(0)
    clock.now += 0.05
    a.maybe_throttle(100)  # 200 bytes 0.05 s into the period: still inside it
    assert len(clock.slept) == 1
    clock.now += 0.05
    b.maybe_throttle(100)  # 300 bytes by 0.1 s: 0.3 s worth
    assert clock.slept[1:] == [("b", pytest.approx(0.2))]


def test_a_worker_reporting_while_another_sleeps_waits_for_it():
    """A worker that reports bytes while another sleeps off the shared period waits until that
    sleep ends (Kafka's threads wait for the throttler's lock meanwhile)."""
    throttle = log_cleaner.LogCleaner(Path("unused"), dict, CleanerConfig(io_max_bytes_per_second=1000.0)).throttle
    clock = _Clock()
    clock.now = throttle.start + 0.5
    a = _SharedRateThrottler(throttle, clock=lambda: clock.now, sleep=lambda s: clock.slept.append(("a", s)))
    b = _SharedRateThrottler(throttle, clock=lambda: clock.now, sleep=clock.sleeper("b"))
    a.maybe_throttle(2000)  # a sleeps 1.5 s (its sleep does not move this clock)
    clock.now += 0.5
    b.maybe_throttle(10)
    assert clock.slept == [("a", pytest.approx(1.5)), ("b", pytest.approx(1.0))]
