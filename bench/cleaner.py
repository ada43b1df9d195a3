"""Log cleaner on a dirty `__consumer_offsets` partition: cleaning throughput, load time before and
after cleaning, and commit latency while the broker's cleaner runs.

    python -m bench.cleaner [--records N] [--keys K] [--seconds S] [--quick]
    python -m bench.cleaner --cpu-only [--records N] [--repeats R]
    python -m bench.cleaner --disk-only [--records N] [--repeats R] [--seconds S] [--paced-rate R]

--cpu-only runs no broker: it writes the dirty partition in a temporary directory and, R times,
times loading's scan of it (LogPartitionWriter.read_latest) and the worker's cleaning of it
(cleaner_worker.run_job, in this process at this process's priority), both in CPU seconds, and
prints records per CPU-second of each and their ratio (the issue's "cleaning rate vs loading
rate" without the machine's load or the worker's nice level in it).

--disk-only runs no broker either: a thread writes and fsyncs a small file at --paced-rate on a
fixed schedule (a commit's disk work) for --seconds, then while a cleaner worker process cleans R
copies of the dirty partition one after another (the swaps done in this process as the broker
does them); the fsyncs' p50/p99 from their slots in both windows and the ratio: the cleaner's
effect on the commits' disk without the broker's CPU in it.

Steps, all in one run (tidemark brokers as child processes, temporary data dirs,
offsets.topic.segment.bytes=--segment-bytes so the partition spans several segments):
  (1) --records offset commit records over --keys keys of one group, written straight into one
      offsets partition with tidemark.log.UnifiedLog while the broker is down (the last record per key wins).
  (2) the broker restarted with log.cleaner.enable=false; its `offsets_partition_loaded` log line
      gives the load time and records/s of the dirty partition.
  (3) the partition cleaned in this process with tidemark.log.cleaner.Cleaner (everything below the
      active segment; the broker's cleaner before it moved to a worker process, GIL sharing
      included): MB/s (segment bytes recopied from) and records/s, timed around Cleaner.clean();
      then a copy of the dirty partition (taken before) cleaned as the broker's cleaner does now,
      by a cleaner worker process (tidemark.log.cleaner_worker), timed by the worker (its
      CleanerStats, without the process start); both against (2)'s load rate.
      Also in CPU seconds, which the machine's load and the worker's lower priority do not
      skew: the worker's own (CleanerStats.cpu_s) against loading's scan of the same dirty
      partition (the broker's LogPartitionWriter.read_latest run here, median of 3).
  (4) the broker restarted again (cleaner disabled): load time of the cleaned partition.
  (5) a second data dir: a larger dirty partition of another group, made cleanable only after a
      while through log.cleaner.min.compaction.lag.ms (its records carry the write time), under a
      broker with the cleaner on (log.cleaner.backoff.ms=100). Single-partition commits paced at
      --paced-rate commits/s by a fixed schedule (bench.offsets' case (c), latency from the slot
      time) run for --seconds before that partition becomes cleanable (cleaner idle) and again while
      it is being cleaned; p50/p99 of both and the ratio. The broker's `log_cleaned` line must show
      that the cleaning started before the second window and ended after it, and the first before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.table import Table

from bench.offsets import FIND_COORDINATOR, LOAD_BATCH, OFFSETS_PARTITIONS, TIDEMARK_SETTINGS, Latencies, run_clients
from bench.produce_fetch import BenchError, BrokerProcess, TidemarkTarget, console, out
from tests.integration.raw import RawClient
from tidemark.broker.coordinator_io import LogPartitionWriter
from tidemark.coordinator.partitioner import partition_for
from tidemark.log import LogConfig, UnifiedLog
from tidemark.log.cleaner import DEFAULT_MAX_MAP_ENTRIES, Cleaner, CleanerStats, Throttler
from tidemark.log.cleaner_worker import CleanerWorker, make_job, run_job, swap_in
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)

MB = 1_000_000
CLEANER_BACKOFF_MS = 100
MAX_BIG_FACTOR = 40  # (5)'s partition holds at most this many times --records
P99_RATIO_GOAL = 1.5
EVENT_POLL_S = 0.1


def settings(segment_bytes: int, **extra: str) -> dict[str, str]:
    return {**TIDEMARK_SETTINGS, "offsets.topic.segment.bytes": str(segment_bytes), **extra}


# --------------------------------------------------------------------------------------- helpers


class BrokerLog:
    """Reads the JSON log lines a broker wrote since this object was made."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.path = broker.log_path
        self.start = self.path.stat().st_size if self.path.exists() else 0

    def events(self, name: str) -> list[dict]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.start)
            lines = handle.read().splitlines()
        found = []
        for raw in lines:
            with contextlib.suppress(ValueError):
                entry = json.loads(raw)
                if isinstance(entry, dict) and entry.get("event") == name:
                    found.append(entry)
        return found

    def wait_for(self, name: str, timeout: float, **match) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for entry in self.events(name):
                if all(entry.get(key) == value for key, value in match.items()):
                    return entry
            if time.monotonic() > deadline:
                raise BenchError(f"no {name} {match} in the broker log within {timeout:.0f} s")
            time.sleep(EVENT_POLL_S)


def stop_cleanly(broker: BrokerProcess) -> None:
    try:
        if broker.stop(timeout=120) != 0:
            raise BenchError(f"broker did not stop cleanly:\n{broker.log_text()[-2000:]}")
    finally:
        broker.kill()


def create_offsets_topic(data_dir: Path, broker_settings: dict[str, str], group: str) -> None:
    """Start a broker once so it creates `__consumer_offsets` with these settings, then stop it."""
    broker = BrokerProcess(data_dir, broker_settings).start()
    try:
        with RawClient(broker.bootstrap) as client:
            client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    finally:
        stop_cleanly(broker)


def offsets_log(data_dir: Path, group: str, segment_bytes: int) -> UnifiedLog:
    return UnifiedLog.open(data_dir / f"__consumer_offsets-{partition_for(group, OFFSETS_PARTITIONS)}",
                    LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact"), clean_shutdown=True)


@dataclass
class Partition:
    records: int
    bytes: int
    segments: int
    write_seconds: float


def write_dirty(data_dir: Path, group: str, records: int, keys: int, segment_bytes: int, timestamp_ms: int) -> Partition:
    """`records` offset commits over `keys` partitions of `group`, appended to its offsets partition."""
    started = time.perf_counter()
    log = offsets_log(data_dir, group, segment_bytes)
    try:
        if log.log_end_offset != 0:
            raise BenchError(f"offsets partition of {group} is not empty ({log.log_end_offset} records)")
        encoded = [encode_key(OffsetCommitKey(group, "dirty", p)) for p in range(keys)]
        for start in range(0, records, LOAD_BATCH):
            log.append(build_batch([
                (encoded[i % keys], encode_offset_commit_value(OffsetCommitValue(offset=i, commit_timestamp=timestamp_ms)),
                 (), timestamp_ms)
                for i in range(start, min(records, start + LOAD_BATCH))]), now_ms=timestamp_ms)
        return Partition(records, log.size_in_bytes, len(log.segments), time.perf_counter() - started)
    finally:
        log.close()


@dataclass
class Load:
    records: int
    seconds: float
    bytes: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else math.inf

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds if self.seconds > 0 else math.inf


def measure_load(data_dir: Path, broker_settings: dict[str, str], group: str, expected: int, size: int,
                 timeout: float) -> Load:
    """Start a broker (cleaner off), read how long the group's offsets partition took to load, stop."""
    index = partition_for(group, OFFSETS_PARTITIONS)
    broker = BrokerProcess(data_dir, {**broker_settings, "log.cleaner.enable": "false"})
    lines = BrokerLog(broker)
    broker.start()
    try:
        line = lines.wait_for("offsets_partition_loaded", timeout, partition=index)
    finally:
        stop_cleanly(broker)
    if line["records"] != expected:
        raise BenchError(f"offsets partition {index} loaded {line['records']} records, expected {expected}")
    return Load(line["records"], line["seconds"], size)


def load_scan_cpu(data_dir: Path, group: str, segment_bytes: int, repeats: int = 3) -> tuple[int, float]:
    """(keyed records, CPU seconds) of loading's scan of the partition: the broker's
    LogPartitionWriter.read_latest from the log start to the high watermark, the median of
    `repeats` runs in this process."""
    log = offsets_log(data_dir, group, segment_bytes)
    try:
        reader = object.__new__(LogPartitionWriter)  # only its reading half: the log and the buffer size
        reader.partition, reader.load_buffer_size = argparse.Namespace(log=log), int(TIDEMARK_SETTINGS.get(
            "offsets.load.buffer.size", 5 * 1024 * 1024))
        runs = []
        for _ in range(repeats):
            started, records, position, latest = time.process_time(), 0, log.log_start_offset, {}
            while position < log.log_end_offset:
                keyed, position = reader.read_latest(position, log.log_end_offset, latest)
                records += keyed
            runs.append(time.process_time() - started)
        return records, statistics.median(runs)
    finally:
        log.close()


@dataclass
class Cleaning:
    stats: CleanerStats
    seconds: float
    bytes_after: int
    segments_after: int
    cpu_seconds: float = 0.0  # of the calling process (the broker's, in the broker)

    @property
    def mb_per_s(self) -> float:
        return self.stats.bytes_read / MB / self.seconds

    @property
    def records_per_s(self) -> float:
        return self.stats.records_read / self.seconds

    @property
    def records_per_cpu_s(self) -> float:
        return self.stats.records_read / self.stats.cpu_s if self.stats.cpu_s > 0 else math.inf


def clean_in_worker(data_dir: Path, group: str, segment_bytes: int) -> Cleaning:
    """Clean as the broker's LogCleaner does: the job to a worker process, its cleaned
    segments swapped in here as they come."""
    log = offsets_log(data_dir, group, segment_bytes)
    worker = CleanerWorker(math.inf)
    worker.start()
    try:
        made = make_job(log, 0, int(time.time() * 1000), DEFAULT_MAX_MAP_ENTRIES)
        if made is None:
            raise BenchError("nothing to clean")
        job, segments = made
        by_base = {seg.base_offset: seg for seg in segments}
        refused = []
        cpu = time.process_time()

        def on_group(bases: list[int], cleaned_base: int) -> None:
            if not swap_in(log, job, [by_base[b] for b in bases], cleaned_base):
                refused.append(bases[0])

        _end, stats = worker.run(job, on_group)
        if refused:
            raise BenchError(f"swaps refused at {refused}")
        return Cleaning(stats, stats.elapsed_s, log.size_in_bytes, len(log.segments), time.process_time() - cpu)
    finally:
        worker.stop()
        log.close()


def clean_in_process(data_dir: Path, group: str, segment_bytes: int) -> Cleaning:
    log = offsets_log(data_dir, group, segment_bytes)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        _end, stats = Cleaner().clean(log, 0)
        seconds = time.perf_counter() - started
        return Cleaning(stats, seconds, log.size_in_bytes, len(log.segments), time.process_time() - cpu)
    finally:
        log.close()


# ------------------------------------------------------------------------- (5) commits vs cleaning


class CleanerTarget(TidemarkTarget):
    """TidemarkTarget on an existing data dir with the given settings."""

    def __init__(self, data_dir: Path, broker_settings: dict[str, str]) -> None:
        self.broker = BrokerProcess(data_dir, broker_settings)
        self.lines = BrokerLog(self.broker)
        self.broker.start()
        self.bootstrap = self.broker.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})


def group_not_on(name: str, taken: set[int]) -> str:
    """`name`, or `name-N` for the first N whose offsets partition is not in `taken`."""
    for n in range(OFFSETS_PARTITIONS * 10):
        candidate = name if n == 0 else f"{name}-{n}"
        if partition_for(candidate, OFFSETS_PARTITIONS) not in taken:
            return candidate
    raise BenchError(f"no group name like {name} avoids offsets partitions {sorted(taken)}")


@dataclass
class UnderCleaning:
    big: Partition
    idle: Latencies
    cleaning: Latencies
    cleaned: dict  # the broker's log_cleaned line
    clean_started: float  # wall clock
    clean_ended: float
    windows: tuple[tuple[float, float], tuple[float, float]]  # wall clock (start, end) of each window

    @property
    def p99_ratio(self) -> float:
        return self.cleaning.p(0.99) / self.idle.p(0.99)

    @property
    def broker_records_per_s(self) -> float:
        return self.cleaned["records_read"] / self.cleaned["seconds"]

    @property
    def broker_mb_per_s(self) -> float:
        return self.cleaned["bytes_read"] / MB / self.cleaned["seconds"]


def paced_window(target: CleanerTarget, topic: str, group: str, args) -> tuple[Latencies, tuple[float, float]]:
    began = time.time()
    latencies, _ = run_clients(target.bootstrap, topic, group, [[p] for p in range(args.paced_clients)],
                               args.seconds, paced_rate=args.paced_rate)
    return latencies, (began, time.time())


def run_under_cleaning(tmp: Path, args, big_records: int, load_rate: float) -> UnderCleaning:
    data_dir = tmp / "commit-data"
    big_group = "bench-cleaner-big"
    big_index = partition_for(big_group, OFFSETS_PARTITIONS)
    idle_group = group_not_on("bench-cleaner-paced-idle", {big_index})
    busy_group = group_not_on("bench-cleaner-paced-busy", {big_index})
    base = settings(args.segment_bytes, **{"log.cleaner.backoff.ms": str(CLEANER_BACKOFF_MS)})
    create_offsets_topic(data_dir, base, big_group)
    written_ms = int(time.time() * 1000)
    big = write_dirty(data_dir, big_group, big_records, args.keys, args.segment_bytes, written_ms)
    console.print(f"  (5) wrote {big.records:,} records ({big.bytes / MB:,.0f} MB, {big.segments} segments) "
                  f"for {big_group} in {big.write_seconds:.1f} s")

    # The big partition becomes cleanable once min.compaction.lag.ms has passed since its records'
    # timestamps: after its load, the topic, the consumers and the idle window, with margin.
    expected_load_s = big_records / load_rate
    clean_at = time.time() + 10 + 4 * expected_load_s + args.seconds + 10
    lag_ms = int(clean_at * 1000) - written_ms
    target = CleanerTarget(data_dir, {**base, "log.cleaner.min.compaction.lag.ms": str(lag_ms)})
    with contextlib.closing(target):
        target.lines.wait_for("offsets_partition_loaded", 60 + 4 * expected_load_s, partition=big_index)
        topic = "bench-cleaner-paced"
        got = target.create_topic(topic, args.paced_clients, 30)
        if got != args.paced_clients:
            raise BenchError(f"{topic} has {got} partitions, wanted {args.paced_clients}")
        if time.time() + args.seconds + 2 > clean_at:
            raise BenchError("the broker took too long to load; the idle window would overlap the cleaning")
        if target.lines.events("log_cleaned"):
            raise BenchError(f"the cleaner ran before the idle window: {target.lines.events('log_cleaned')}")
        idle, idle_window = paced_window(target, topic, idle_group, args)
        console.print(f"  (5) cleaner idle: p50 {idle.p(0.5):.2f} ms, p99 {idle.p(0.99):.2f} ms")
        # Cleanable at clean_at; the cleaner looks every backoff.ms; then give its map a head start.
        time.sleep(max(0.0, clean_at - time.time()) + CLEANER_BACKOFF_MS / 1000 + 0.5)
        if target.lines.events("log_cleaned"):
            raise BenchError("the cleaning was over before the second window; raise --big-factor")
        cleaning, busy_window = paced_window(target, topic, busy_group, args)
        console.print(f"  (5) cleaner busy: p50 {cleaning.p(0.5):.2f} ms, p99 {cleaning.p(0.99):.2f} ms")
        line = target.lines.wait_for("log_cleaned", 120 + 4 * expected_load_s, partition=big_index)
    ended = datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()
    started = ended - line["seconds"]
    if not (idle_window[1] <= started <= busy_window[0] and ended >= busy_window[1]):
        raise BenchError(f"cleaning ran {started:.1f}..{ended:.1f}, windows {idle_window} and {busy_window}: "
                         "the idle window must end before it starts and the busy window lie within it")
    return UnderCleaning(big, idle, cleaning, line, started, ended, (idle_window, busy_window))


# ------------------------------------------------------------------------------------------ table


def _met(ok: bool) -> str:
    return "[green]yes[/green]" if ok else "[red]no[/red]"


def results_table(args, dirty: Partition, before: Load, cleaning: Cleaning, worker: Cleaning, after: Load,
                  commits: UnderCleaning | None, title: str, scan: tuple[int, float]) -> Table:
    table = Table(title=title, title_justify="left")
    for name, justify in (("step", "left"), ("metric", "left"), ("value", "right"), ("goal", "right"),
                          ("met", "center")):
        table.add_column(name, justify=justify)
    table.add_row(f"(1) dirty partition, {args.keys:,} keys", "records", f"{dirty.records:,}", "", "")
    table.add_row("", "MB / segments", f"{dirty.bytes / MB:,.1f} / {dirty.segments}", "", "")
    table.add_section()
    table.add_row("(2) load before cleaning", "seconds", f"{before.seconds:.2f}", "", "")
    table.add_row("", "records/s", f"{before.records_per_s:,.0f}", "", "")
    table.add_row("", "MB/s", f"{before.mb_per_s:,.1f}", "", "")
    table.add_section()
    stats = cleaning.stats
    table.add_row("(3) clean (in-process Cleaner)", "seconds", f"{cleaning.seconds:.2f}", "", "")
    table.add_row("", "records/s (records recopied from)", f"{cleaning.records_per_s:,.0f}",
                  f">= {before.records_per_s:,.0f} (load)", _met(cleaning.records_per_s >= before.records_per_s))
    table.add_row("", "MB/s (segment bytes recopied from)", f"{cleaning.mb_per_s:,.1f}",
                  f">= {before.mb_per_s:,.1f} (load)", _met(cleaning.mb_per_s >= before.mb_per_s))
    table.add_row("", "records kept / read", f"{stats.records_written:,} / {stats.records_read:,}", "", "")
    table.add_row("", "MB / segments after", f"{cleaning.bytes_after / MB:,.1f} / {cleaning.segments_after}", "", "")
    table.add_row("    clean (worker process)", "seconds", f"{worker.seconds:.2f}", "", "")
    table.add_row("", "records/s (records recopied from)", f"{worker.records_per_s:,.0f}",
                  f">= {before.records_per_s:,.0f} (load)", _met(worker.records_per_s >= before.records_per_s))
    table.add_row("", "CPU s in the calling process (in-process, worker)",
                  f"{cleaning.cpu_seconds:.2f}, {worker.cpu_seconds:.2f}", "", "")
    table.add_row("", "cleaning / load rate (in-process, worker)",
                  f"{cleaning.records_per_s / before.records_per_s:.2f}x, "
                  f"{worker.records_per_s / before.records_per_s:.2f}x", ">= 1x", "")
    scan_rate = scan[0] / scan[1] if scan[1] > 0 else math.inf
    table.add_row("", "records per CPU-second (loading's scan, worker)",
                  f"{scan_rate:,.0f}, {worker.records_per_cpu_s:,.0f}", "", "")
    table.add_row("", "cleaning / loading's scan, per CPU-second", f"{worker.records_per_cpu_s / scan_rate:.2f}x",
                  ">= 1x", _met(worker.records_per_cpu_s >= scan_rate))
    table.add_section()
    table.add_row("(4) load after cleaning", "seconds", f"{after.seconds:.2f}", "", "")
    table.add_row("", "records", f"{after.records:,}", "", "")
    table.add_row("", "load time before / after", f"{before.seconds / after.seconds:.1f}x", "", "")
    if commits is not None:
        table.add_section()
        table.add_row(f"(5) paced {args.paced_rate:,.0f} commits/s, {args.seconds:g} s", "achieved/s idle / cleaning",
                      f"{commits.idle.ops_per_s:,.0f} / {commits.cleaning.ops_per_s:,.0f}", "", "")
        table.add_row("    cleaner idle", "p50 / p99 ms", f"{commits.idle.p(0.5):.2f} / {commits.idle.p(0.99):.2f}", "", "")
        table.add_row(f"    cleaning {commits.big.records:,} records", "p50 / p99 ms",
                      f"{commits.cleaning.p(0.5):.2f} / {commits.cleaning.p(0.99):.2f}", "", "")
        table.add_row("", "p99 cleaning / idle", f"{commits.p99_ratio:.2f}x", f"<= {P99_RATIO_GOAL:g}x",
                      _met(commits.p99_ratio <= P99_RATIO_GOAL))
        table.add_row("    broker's cleaner", "records/s / MB/s (log_cleaned)",
                      f"{commits.broker_records_per_s:,.0f} / {commits.broker_mb_per_s:,.1f}", "", "")
        table.add_row("", "cleaning seconds", f"{commits.cleaned['seconds']:.2f}", "", "")
    return table


# ------------------------------------------------------------------------------------ --cpu-only


def cpu_only(args) -> int:
    group = "bench-cleaner-load"
    ratios = []
    table = Table(title=f"cleaning vs loading's scan in CPU seconds: {args.records:,} records, {args.keys:,} keys, "
                        f"{args.segment_bytes / 2**20:g} MiB segments", title_justify="left")
    for name in ("run", "loading's scan, records/CPU-s", "cleaning (run_job), records/CPU-s", "cleaning / loading"):
        table.add_column(name, justify="right")
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-cleaner-cpu-") as tmp_name:
        tmp = Path(tmp_name)
        write_dirty(tmp / "pristine", group, args.records, args.keys, args.segment_bytes, int(time.time() * 1000))
        for run in range(1, args.repeats + 1):
            shutil.rmtree(tmp / "data", ignore_errors=True)
            shutil.copytree(tmp / "pristine", tmp / "data")
            records, scan_cpu = load_scan_cpu(tmp / "data", group, args.segment_bytes, repeats=1)
            log = offsets_log(tmp / "data", group, args.segment_bytes)
            try:
                made = make_job(log, 0, int(time.time() * 1000), DEFAULT_MAX_MAP_ENTRIES)
                if made is None:
                    raise BenchError("nothing to clean")
                _end, stats = run_job(made[0], lambda message: None, threading.Event(), Throttler())
            finally:
                log.close()
            scan_rate, clean_rate = records / scan_cpu, stats.records_read / stats.cpu_s
            ratios.append(clean_rate / scan_rate)
            table.add_row(str(run), f"{scan_rate:,.0f}", f"{clean_rate:,.0f}", f"{clean_rate / scan_rate:.2f}x")
    table.add_section()
    table.add_row("median", "", "", f"{statistics.median(ratios):.2f}x")
    out.print(table)
    return 0


def _paced_fsyncs(path: Path, rate: float, stop: threading.Event, out_: list[tuple[float, float]]) -> None:
    """A commit's disk work without the broker: at `rate` per second, on a fixed schedule, write
    a small record and fsync the file; (slot time, latency from the slot) of each."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        interval = 1 / rate
        slot = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()
            if now < slot:
                time.sleep(slot - now)
            os.write(fd, b"x" * 120)
            os.fsync(fd)
            out_.append((slot, time.monotonic() - slot))
            slot += interval
    finally:
        os.close(fd)


def disk_only(args) -> int:
    """No broker: the fsync latency of a paced fsync loop on the same disk, idle and while a
    cleaner worker process (its own priorities) cleans copies of a dirty partition one after
    another, the swaps done here as the broker does them; p50/p99 and the ratio."""
    group = "bench-cleaner-load"
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-cleaner-disk-") as tmp_name:
        tmp = Path(tmp_name)
        write_dirty(tmp / "copy-0", group, args.records, args.keys, args.segment_bytes, int(time.time() * 1000))
        for n in range(1, args.repeats):
            shutil.copytree(tmp / "copy-0", tmp / f"copy-{n}")
        os.sync()  # the copies on the disk before either window
        time.sleep(2)  # and the disk's queue drained of them
        worker = CleanerWorker(math.inf)
        worker.start()
        samples: list[tuple[float, float]] = []
        stop = threading.Event()
        pacer = threading.Thread(target=_paced_fsyncs, args=(tmp / "journal", args.paced_rate, stop, samples))
        pacer.start()
        try:
            time.sleep(args.seconds)
            idle_end = time.monotonic()
            cleaned, busy_start = 0, time.monotonic()
            for n in range(args.repeats):
                log = offsets_log(tmp / f"copy-{n}", group, args.segment_bytes)
                try:
                    job, segments = make_job(log, 0, int(time.time() * 1000), DEFAULT_MAX_MAP_ENTRIES)
                    by_base = {seg.base_offset: seg for seg in segments}
                    _end, stats = worker.run(job, lambda bases, base: swap_in(
                        log, job, [by_base[b] for b in bases], base))
                    cleaned += stats.records_read
                finally:
                    log.close()
            busy_end = time.monotonic()
        finally:
            stop.set()
            pacer.join()
            worker.stop()
    idle = sorted(lat for slot, lat in samples if slot < idle_end)
    busy = sorted(lat for slot, lat in samples if busy_start <= slot < busy_end)
    if len(busy) < 50:
        raise BenchError(f"the cleaning took {busy_end - busy_start:.2f} s: too short, raise --repeats or --records")

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000

    out.print(f"paced fsyncs at {args.paced_rate:g}/s: idle p50 {pct(idle, 0.5):.2f} ms, p99 {pct(idle, 0.99):.2f} ms "
              f"({len(idle)}); while the worker cleaned {cleaned:,} records in {busy_end - busy_start:.2f} s: "
              f"p50 {pct(busy, 0.5):.2f} ms, p99 {pct(busy, 0.99):.2f} ms ({len(busy)}); "
              f"p99 cleaning / idle {pct(busy, 0.99) / pct(idle, 0.99):.2f}x")
    return 0


# ------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.cleaner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="(1) records in the dirty partition")
    parser.add_argument("--keys", type=int, default=1_000, help="(1) distinct keys (partitions committed)")
    parser.add_argument("--segment-bytes", type=int, default=10 * 1024 * 1024, help="offsets.topic.segment.bytes")
    parser.add_argument("--seconds", type=float, default=5.0, help="(5) length of each commit window (default 5)")
    parser.add_argument("--paced-rate", type=float, default=500.0, help="(5) commits/s in total (default 500)")
    parser.add_argument("--paced-clients", type=int, default=5, help="(5) consumers sharing the schedule")
    parser.add_argument("--big-factor", type=float, default=None,
                        help="(5) the cleaned partition's size in --records (default: from (3)'s worker rate, "
                             f"enough for 3x --seconds + 2 s of cleaning, at most {MAX_BIG_FACTOR})")
    parser.add_argument("--skip-commits", action="store_true", help="skip (5)")
    parser.add_argument("--cpu-only", action="store_true",
                        help="no broker: loading's scan against the worker's cleaning, in CPU seconds")
    parser.add_argument("--repeats", type=int, default=3, help="--cpu-only: runs; --disk-only: copies cleaned (default 3)")
    parser.add_argument("--disk-only", action="store_true",
                        help="no broker: a paced fsync loop's latency, idle and while a worker cleans")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100,000 records, 1 MiB segments, 2 s windows")
    args = parser.parse_args(argv)
    if args.quick:
        args.records = min(args.records, 100_000)
        args.seconds = min(args.seconds, 2.0)
        args.segment_bytes = min(args.segment_bytes, 1024 * 1024)  # still several segments
    if min(args.records, args.keys, args.segment_bytes, args.seconds, args.paced_rate, args.paced_clients) <= 0:
        parser.error("counts, sizes, rates and durations must be positive")
    if args.keys > args.records:
        parser.error("--keys must not exceed --records")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cpu_only:
        return cpu_only(args)
    if args.disk_only:
        return disk_only(args)
    run_started = time.monotonic()
    group = "bench-cleaner-load"
    base = settings(args.segment_bytes)
    load_timeout = 60 + args.records / 10_000
    commits = None
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-cleaner-") as tmp_name:
        tmp = Path(tmp_name)
        data_dir = tmp / "load-data"
        with console.status(f"(1) writing {args.records:,} offset commit records"):
            create_offsets_topic(data_dir, {**base, "log.cleaner.enable": "false"}, group)
            dirty = write_dirty(data_dir, group, args.records, args.keys, args.segment_bytes, int(time.time() * 1000))
        console.print(f"  (1) {dirty.records:,} records, {dirty.bytes / MB:,.1f} MB in {dirty.segments} segments, "
                      f"written in {dirty.write_seconds:.1f} s")
        with console.status("(2) loading the dirty partition"):
            before = measure_load(data_dir, base, group, dirty.records, dirty.bytes, load_timeout)
        console.print(f"  (2) loaded in {before.seconds:.2f} s: {before.records_per_s:,.0f} records/s")
        scan = load_scan_cpu(data_dir, group, args.segment_bytes)
        shutil.copytree(data_dir, tmp / "worker-data")
        with console.status("(3) cleaning in-process"):
            cleaning = clean_in_process(data_dir, group, args.segment_bytes)
        with console.status("(3) cleaning in a worker process"):
            worker = clean_in_worker(tmp / "worker-data", group, args.segment_bytes)
        shutil.rmtree(tmp / "worker-data")
        if (worker.stats.records_read, worker.stats.records_written) != (cleaning.stats.records_read,
                                                                          cleaning.stats.records_written):
            raise BenchError(f"the worker kept {worker.stats.records_written} of {worker.stats.records_read} records, "
                             f"the in-process cleaner {cleaning.stats.records_written} of {cleaning.stats.records_read}")
        console.print(f"  (3) worker process: {worker.seconds:.2f} s, {worker.records_per_s:,.0f} records/s")
        stats = cleaning.stats
        if dirty.segments < 2:
            raise BenchError(f"the dirty partition has {dirty.segments} segment: lower --segment-bytes")
        if stats.records_read == 0 or stats.records_written > stats.records_read:
            raise BenchError(f"the cleaner read {stats.records_read} records and kept {stats.records_written}")
        console.print(f"  (3) cleaned in {cleaning.seconds:.2f} s: {cleaning.records_per_s:,.0f} records/s, "
                      f"{cleaning.mb_per_s:,.1f} MB/s, kept {stats.records_written:,} of {stats.records_read:,}")
        with console.status("(4) loading the cleaned partition"):
            remaining = dirty.records - (stats.records_read - stats.records_written)
            after = measure_load(data_dir, base, group, remaining, cleaning.bytes_after, load_timeout)
        console.print(f"  (4) loaded {after.records:,} records in {after.seconds:.2f} s")
        if not args.skip_commits:
            factor = args.big_factor
            if factor is None:
                # The broker's cleaner (the worker) at (3)'s rate for 3 windows and 2 s more.
                factor = (3 * args.seconds + 2) * worker.records_per_s / args.records
            big_records = max(args.keys, int(args.records * min(MAX_BIG_FACTOR, max(1.0, factor))))
            with console.status(f"(5) commits with the cleaner idle, then cleaning {big_records:,} records"):
                commits = run_under_cleaning(tmp, args, big_records, before.records_per_s)
    title = (f"log cleaner on __consumer_offsets: {args.records:,} records, {args.keys:,} keys, "
             f"{args.segment_bytes / 2**20:g} MiB segments, {time.monotonic() - run_started:.0f} s total")
    out.print(results_table(args, dirty, before, cleaning, worker, after, commits, title, scan))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, KafkaException, RuntimeError) as error:
        console.print(f"[red]benchmark failed: {error}")
        sys.exit(1)
