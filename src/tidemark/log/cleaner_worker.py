"""The log cleaner's worker process: the copy work of a cleaning runs outside the broker's
interpreter, so it never takes the GIL from the event loop.

The broker picks the log and the range (make_job: paths, offsets and settings, no live
objects) and sends the CleaningJob to its worker, one long-lived process started with the
'spawn' context. The worker opens the segment files by path, builds the offset map and writes
each group's cleaned segment as "<base>.log.cleaned" (with its .index, .timeindex and .txnindex,
fsynced), then reports the group. The broker swaps it in on its own side (swap_in: the usual
".cleaned" -> ".swap" -> rename under the log's lock), but only if the segments the job started
from are still in the log, the very objects with the sizes the job read: a log truncated,
deleted or cleaned meanwhile never gets stale segments back; the job is then aborted.

The worker dies with the broker (PR_SET_PDEATHSIG), runs at a lower CPU priority (SCHED_IDLE
and nice 10: the event loop first where cores are scarce) and the lowest best-effort I/O
priority, throttles itself to log.cleaner.io.max.bytes.per.second through a SharedThrottle
every worker of the broker uses (one rate for all of them, as Kafka's cleaner threads share one
Throttler), and stops between batches when the abort event is set.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import platform
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from .cleaner import (
    Cleaner,
    CleanerStats,
    ThrottlePeriod,
    Throttler,
    aborted_transactions,
    discard_cleaned,
    first_uncleanable_offset,
    known_producers,
)
from .local_log import CLEANED_SUFFIX
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_name
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from .unified_log import UnifiedLog

_SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_POLL_S = 0.2  # how often the broker's side looks whether a silent worker still lives
_PR_SET_PDEATHSIG = 1
# The worker's CPU priority below the broker's: where cores are scarce, the event loop (commits,
# fetches) runs first and the cleaning takes what is left. SCHED_IDLE (Linux) goes further than
# nice 10: the worker runs only on a core no ordinary task wants, so it no longer takes a slice
# of the event loop's core when both cores are busy; on an otherwise idle core it runs at full
# speed. The nice level stays for where SCHED_IDLE cannot be set.
WORKER_NICE = 10
WORKER_SCHED_POLICY = getattr(os, "SCHED_IDLE", None)
# Its I/O priority likewise: the lowest of the best-effort class (ioprio_set). bfq orders by the
# level; mq-deadline (this machine's default) only by class, and the idle class is not used:
# ext4's journal commit waits for the cleaner's ordered data, so idle-class writes would stall
# the commits' fsyncs behind them.
_IOPRIO_CLASS_SHIFT = 13
IOPRIO_CLASS_BE = 2
WORKER_IOPRIO = (IOPRIO_CLASS_BE << _IOPRIO_CLASS_SHIFT) | 7
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_SYSCALLS = {"x86_64": (251, 252), "aarch64": (30, 31)}  # ioprio_set, ioprio_get

_logger = structlog.get_logger("tidemark.log.cleaner_worker")


class WorkerDied(Exception):
    """The worker process ended in the middle of a job (killed, or crashed)."""


class StaleJob(Exception):
    """The job's segment files were gone or shorter than the job says when the worker read them."""


class CleaningFailed(Exception):
    """The cleaning raised in the worker (a corrupt batch, an I/O error): its message."""


@dataclass(frozen=True)
class SegmentSpec:
    base_offset: int
    size: int
    next_offset: int
    last_modified_ms: int


@dataclass(frozen=True)
class CleaningJob:
    directory: str
    segments: tuple[SegmentSpec, ...]
    first_dirty_offset: int  # the checkpoint the cleaning started from
    first_dirty: int  # where the offset map starts (not below the log start offset)
    end: int  # the first uncleanable offset
    aborted: tuple[AbortedTxn, ...]
    producers: dict[int, int]
    active_producers: frozenset[int]
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    index_max_bytes: int
    max_map_entries: int
    truncations: int  # the log's truncation count when the job was made


def make_job(log: UnifiedLog, first_dirty_offset: int, now_ms: int,
             max_map_entries: int) -> tuple[CleaningJob, list[LogSegment]] | None:
    """The job for cleaning `log` as Cleaner.clean would, and the segments it starts from;
    None if there is nothing to clean."""
    truncations = log.local.truncations  # read first: a truncation after it shows
    snapshot, active_base, hw = log.cleaning_snapshot()
    for _, fd in snapshot:
        os.close(fd)  # the worker opens the files itself
    segments = [seg for seg, _ in snapshot]
    config = log.config
    end = first_uncleanable_offset(segments, active_base, hw, config.min_compaction_lag_ms, now_ms)
    segments = [seg for seg in segments if end >= seg.next_offset > log.log_start_offset]
    first_dirty = max(first_dirty_offset, log.log_start_offset)
    if not segments or first_dirty >= end:
        return None
    producers, active = known_producers(log)
    job = CleaningJob(
        str(log.directory),
        tuple(SegmentSpec(seg.base_offset, seg.size, seg.next_offset, seg.last_modified_ms) for seg in segments),
        first_dirty_offset, first_dirty, end, tuple(aborted_transactions(log, segments, end)), producers,
        frozenset(active), now_ms, config.delete_retention_ms, config.segment_bytes, config.index_interval_bytes,
        config.segment_index_bytes, max_map_entries, truncations)
    return job, segments


def swap_in(log: UnifiedLog, job: CleaningJob, old: list[LogSegment], cleaned_base: int) -> bool:
    """Swap the worker's cleaned segment at cleaned_base in for `old`, if they are still the
    log's segments as the job read them; False (its files deleted) otherwise."""
    cleaned = LogSegment(log.directory, cleaned_base, index_interval_bytes=job.index_interval_bytes,
                         index_max_bytes=job.index_max_bytes, suffix=CLEANED_SUFFIX)
    try:
        if not cleaned.open_from_indexes(active=False):
            cleaned.recover(validate=False, active=False, truncate=False)
        sizes = {spec.base_offset: spec.size for spec in job.segments}
        # Under the log's lock: these very segment objects still consecutive in the log (a
        # truncation replaces the segment it cuts), with the sizes the worker read, and no
        # truncation at all since the job was made (Kafka aborts a cleaning before truncating):
        # the key map may hold keys whose newer records a truncation removed.
        def unchanged() -> bool:
            return log.local.truncations == job.truncations and all(seg.size == sizes.get(seg.base_offset)
                                                                    for seg in old)

        if not log.replace_segments(old, cleaned, unchanged=unchanged):
            cleaned.delete()
            return False
        return True
    except BaseException:
        discard_cleaned(cleaned)
        raise


def delete_cleaned(directory: Path, base_offset: int) -> None:
    name = segment_name(base_offset)
    for suffix in _SEGMENT_FILE_SUFFIXES:  # named, not globbed: a glob compiles a pattern per segment
        (directory / (name + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)


# -- the broker's side ----------------------------------------------------------------------------


class SharedThrottle(ThrottlePeriod):
    """log.cleaner.io.max.bytes.per.second for every worker process of a broker: the rate (set
    by the broker, changed without a restart) and the throttler's current period, in shared
    memory under one lock, so all the workers together stay under the rate."""

    def __init__(self, rate: float):
        ctx = multiprocessing.get_context("spawn")
        self.rate = ctx.Value("d", rate, lock=False)
        self._period = ctx.Array("d", [time.monotonic(), 0.0], lock=False)  # CLOCK_MONOTONIC: one for all processes
        self.lock = ctx.Lock()

    @property
    def start(self) -> float:
        return self._period[0]

    @start.setter
    def start(self, value: float) -> None:
        self._period[0] = value

    @property
    def observed(self) -> float:
        return self._period[1]

    @observed.setter
    def observed(self, value: float) -> None:
        self._period[1] = value


class CleanerWorker:
    """The broker's handle on one worker process: start, run a job, stop. Start and restart it
    from the event loop's thread (the worker dies when the thread that started it ends).
    `throttle`: the SharedThrottle of all the broker's workers (a rate: one of its own)."""

    def __init__(self, throttle: SharedThrottle | float):
        self._ctx = multiprocessing.get_context("spawn")
        self.abort = self._ctx.Event()
        self.throttle = throttle if isinstance(throttle, SharedThrottle) else SharedThrottle(throttle)
        self.process: multiprocessing.process.BaseProcess | None = None
        self._conn = None

    @property
    def rate(self):
        """The shared log.cleaner.io.max.bytes.per.second (its `.value`)."""
        return self.throttle.rate

    def start(self) -> None:
        parent, child = self._ctx.Pipe()
        self.process = self._ctx.Process(target=_worker_main, args=(child, self.abort, self.throttle, os.getpid()),
                                         name="tidemark-log-cleaner", daemon=True)
        self.process.start()
        child.close()
        self._conn = parent

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def restart(self) -> None:
        self.stop()
        self.start()

    def run(self, job: CleaningJob, on_group: Callable[[list[int], int], None]) -> tuple[int, CleanerStats]:
        """Run one job (blocking: call it from a thread); on_group(old bases, cleaned base) for
        each cleaned segment the worker wrote, in order. Returns the worker's end offset and
        statistics."""
        if not self.alive:
            raise WorkerDied("the cleaner worker is not running")
        self.abort.clear()
        try:
            self._conn.send(job)
        except OSError as exc:
            raise WorkerDied(str(exc)) from None
        while True:
            try:
                if not self._conn.poll(_POLL_S):
                    if not self.process.is_alive():
                        raise WorkerDied(f"the cleaner worker exited ({self.process.exitcode})")
                    continue
                message = self._conn.recv()
            except (EOFError, OSError):
                raise WorkerDied(f"the cleaner worker exited ({self.process.exitcode})") from None
            kind = message[0]
            if kind == "group":
                on_group(message[1], message[2])
            elif kind == "done":
                return message[1], message[2]
            elif kind == "stale":
                raise StaleJob(message[1])
            else:
                raise CleaningFailed(message[1])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker: between batches of its job, else killed after `timeout` s."""
        if self.process is None:
            return
        self.abort.set()
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(None)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        with contextlib.suppress(OSError):
            self._conn.close()
        self.process, self._conn = None, None


# -- the worker's side ----------------------------------------------------------------------------


class _SharedRateThrottler(Throttler):
    """A worker's Throttler on the broker's SharedThrottle: its rate and period."""

    def __init__(self, shared: SharedThrottle, **kw):
        self._shared = shared
        super().__init__(shared.rate.value, period=shared, **kw)

    @property
    def rate(self) -> float:
        return self._shared.rate.value

    @rate.setter
    def rate(self, value: float) -> None:
        pass


class SegmentFile:
    """A segment's .log read by path in the worker: what the Cleaner reads of a LogSegment."""

    scan = LogSegment.scan

    def __init__(self, directory: Path, spec: SegmentSpec, fd: int):
        self.base_offset, self.size, self.next_offset = spec.base_offset, spec.size, spec.next_offset
        self.last_modified_ms = spec.last_modified_ms
        self.log_path = directory / (segment_name(spec.base_offset) + LOG_SUFFIX)
        self.fd = fd


class _WorkerCleaner(Cleaner):
    def _share_the_gil(self) -> None:
        pass  # its own interpreter: nobody to share with


def run_job(job: CleaningJob, send: Callable[[tuple], None], abort, throttler: Throttler) -> tuple[int, CleanerStats]:
    """Clean the job's segments, writing the cleaned ones in the partition directory and
    sending ("group", old bases, cleaned base) as each is complete."""
    directory = Path(job.directory)
    stats = CleanerStats()
    cpu = time.process_time()
    fds: dict[int, int] = {}
    segments = []
    try:
        for spec in job.segments:
            try:
                fd = os.open(directory / (segment_name(spec.base_offset) + LOG_SUFFIX), os.O_RDONLY)
            except FileNotFoundError:
                raise StaleJob(f"segment {spec.base_offset} is gone") from None
            seg = SegmentFile(directory, spec, fd)
            fds[id(seg)] = fd
            segments.append(seg)
            if os.fstat(fd).st_size < spec.size:
                raise StaleJob(f"segment {spec.base_offset} is shorter than {spec.size} bytes")
        cleaner = _WorkerCleaner(throttler=throttler, max_map_entries=job.max_map_entries)
        cleaner.abort = abort
        # Leftovers of an earlier attempt (a cleaned segment is opened to append): one listing
        # for the job rather than an unlink per file of every group.
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.endswith(CLEANED_SUFFIX):
                    os.unlink(entry.path)

        def new_cleaned(base_offset: int) -> LogSegment:
            return LogSegment(directory, base_offset, index_interval_bytes=job.index_interval_bytes,
                              index_max_bytes=job.index_max_bytes, suffix=CLEANED_SUFFIX)

        def hand_over(group: list, cleaned: LogSegment) -> bool:
            cleaned.close()
            send(("group", [seg.base_offset for seg in group], cleaned.base_offset))
            return True

        return cleaner.clean_segments(segments, fds, job.first_dirty_offset, job.first_dirty, job.end,
                                      list(job.aborted), job.producers, set(job.active_producers),
                                      job.delete_retention_ms, job.segment_bytes, job.now_ms, stats, new_cleaned,
                                      hand_over, directory.name)
    finally:
        for fd in fds.values():
            os.close(fd)
        stats.end = time.monotonic()
        stats.cpu_s = time.process_time() - cpu


def _die_with_parent(parent_pid: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the broker died before prctl took effect
        os._exit(0)


def ioprio(pid: int = 0) -> int | None:
    """The I/O priority of process `pid` (0: this one), None where it cannot be read."""
    numbers = _IOPRIO_SYSCALLS.get(platform.machine())
    if numbers is None:
        return None
    value = ctypes.CDLL(None, use_errno=True).syscall(numbers[1], _IOPRIO_WHO_PROCESS, pid)
    return None if value < 0 else value


def _lower_cpu_policy() -> None:
    if WORKER_SCHED_POLICY is not None:
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, WORKER_SCHED_POLICY, os.sched_param(0))


def _lower_io_priority() -> None:
    numbers = _IOPRIO_SYSCALLS.get(platform.machine())
    if numbers is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).syscall(numbers[0], _IOPRIO_WHO_PROCESS, 0, WORKER_IOPRIO)


def _worker_main(conn, abort, throttle: SharedThrottle, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    with contextlib.suppress(OSError):
        os.nice(WORKER_NICE)
    _lower_cpu_policy()
    _lower_io_priority()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the broker's group: the broker stops us
    from tidemark.logging import configure

    configure()
    throttler = _SharedRateThrottler(throttle)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            end, stats = run_job(job, conn.send, abort, throttler)
            conn.send(("done", end, stats))
        except StaleJob as exc:
            conn.send(("stale", str(exc)))
        except Exception as exc:
            conn.send(("error", str(exc) or type(exc).__name__))
