"""Offset commit/fetch: tidemark next to librdkafka's mock cluster, plus tidemark's load and memory.

    python -m bench.offsets [--seconds S] [--quick] [--targets ...] [--profile DIR]

Cases (confluent-kafka Consumers, assign() only, never subscribe(); one group per case):
  (a) many clients: --clients consumers, each assign()ed one partition of a topic with that many
      partitions, each doing synchronous commit(offsets=[...]) in a loop for --seconds; commits/s
      in total and per-commit latency p50/p99.
  (b) batched: one consumer committing --batch-partitions partitions per synchronous commit;
      partition offsets committed per second.
  (c) paced: single-partition commits at --paced-rate commits/s in total, spread over
      --paced-clients consumers (a synchronous client cannot pipeline), each commit sent at its
      slot of a fixed schedule (start + i / rate, not sleep-after-commit). Latency is measured
      from the scheduled time, so a commit sent late counts its lateness (no coordinated omission).
  (d) OffsetFetch: committed() of 1 and of --batch-partitions partitions, latency p50/p99.
  (e) tidemark only: loading a --load-records-record `__consumer_offsets` partition written
      straight into its log while the broker is down; the broker's `offsets_partition_loaded`
      log line gives records/s.
  (f) tidemark only, in this process: bytes per cached offset after replaying --memory-groups x
      --memory-partitions distinct offset commit records into a GroupCoordinatorShard (tracemalloc,
      and the RSS delta of a separate untraced pass, which also gives the raw replay rate).

After (a) and (b) every committed offset is read back and checked. tidemark runs with
group.initial.rebalance.delay.ms=0 and offsets.topic.num.partitions=50; its commits are durable
(the offsets partition is fsync'd before the commit is answered); the mock keeps them in memory.
--profile DIR records the tidemark broker with py-spy during (a), both (b)s, (c) and (e) (the
tmpfs target's into DIR/tmpfs).

The "tmpfs" target runs the cases (a)-(d) on the same broker with its data directory on tmpfs
(/dev/shm), where an fsync returns at once: the broker's code is unchanged, so the gap between the
two tidemark columns is what the disk's fsync costs, and the gap from the tmpfs column to the mock
is the broker's own CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import multiprocessing
import os
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from rich.table import Table

from bench.produce_fetch import (
    BenchError,
    BrokerProcess,
    MockTarget,
    Profiler,
    TidemarkTarget,
    console,
    out,
    summarize_profile,
)
from tests.integration.raw import RawClient
from tidemark.coordinator.partitioner import partition_for
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)

TIDEMARK_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}
OFFSETS_PARTITIONS = 50
FIND_COORDINATOR = 10
MAX_OPS_PER_CLIENT = 2_000_000  # every loop is bounded in count as well as in time
LOAD_BATCH = 5_000  # records per batch written into the offsets log for (e)
LOAD_KEYS = 1_000  # distinct partitions committed in (e): the last record per key wins

GOALS = {
    "b": ("partition offsets/s", 100_000, ">="),
    "c": ("p99 ms", 5.0, "<="),
    "e": ("records/s", 500_000, ">="),
    "f": ("bytes/offset", 150, "<="),
}


class TidemarkOffsetsTarget(TidemarkTarget):
    """TidemarkTarget with the settings this benchmark needs."""

    def __init__(self, tmp: Path) -> None:
        self._memory_dir = None
        if tmp == MEMORY_DIR:
            # The same broker with its log on tmpfs: its fsyncs return at once, so the row's gap to
            # the disk-backed broker is what the disk costs and what is left is the interpreter's.
            self._memory_dir = tempfile.TemporaryDirectory(prefix="tidemark-bench-offsets-", dir=MEMORY_DIR)
            tmp = Path(self._memory_dir.name)
        self.broker = BrokerProcess(tmp / "tidemark-data", TIDEMARK_SETTINGS).start()
        self.bootstrap = self.broker.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._memory_dir is not None:
                self._memory_dir.cleanup()


# --------------------------------------------------------------------------------------- helpers


MEMORY_DIR = Path("/dev/shm")
TARGETS = ("tidemark", "tmpfs", "mock")


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


@dataclass
class Latencies:
    seconds: list[float] = field(default_factory=list)
    operations: int = 0  # requests (commits or fetches)
    items: int = 0  # partition offsets committed or fetched
    elapsed: float = 0.0

    def p(self, q: float) -> float:
        return percentile(sorted(self.seconds), q) * 1000

    @property
    def ops_per_s(self) -> float:
        return self.operations / self.elapsed

    @property
    def items_per_s(self) -> float:
        return self.items / self.elapsed


def new_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "log_level": 3,
    })


def run_clients(bootstrap: str, topic: str, group: str, partition_sets: list[list[int]], seconds: float,
                paced_rate: float | None = None) -> tuple[Latencies, dict[int, int]]:
    """One thread and one consumer per partition set, each committing its set synchronously in a
    loop (next offset each time) until `seconds` pass or MAX_OPS_PER_CLIENT commits. With
    `paced_rate` the clients share one schedule of paced_rate commits/s (client k takes slots
    k, k + n, ...) and latency runs from each slot's time. Returns latencies and the last offset
    committed per partition."""
    consumers = [new_consumer(bootstrap, group) for _ in partition_sets]
    results: list[tuple[list[float], int] | BaseException | None] = [None] * len(partition_sets)
    last: dict[int, int] = {}
    start_at = [0.0]
    # The last thread to arrive sets a common start a little ahead, before anyone is released.
    barrier = threading.Barrier(len(partition_sets) + 1,
                                action=lambda: start_at.__setitem__(0, time.perf_counter() + 0.05))

    def client(index: int) -> None:
        consumer, partitions = consumers[index], partition_sets[index]
        try:
            consumer.assign([TopicPartition(topic, p) for p in partitions])
            # Coordinator found and connection up before the clock starts.
            consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in partitions], asynchronous=False)
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            results[index] = error
        barrier.wait(timeout=60)
        if results[index] is not None:
            return
        latencies: list[float] = []
        offset = 0
        try:
            begin = start_at[0]
            end = begin + seconds
            time.sleep(max(0.0, begin - time.perf_counter()))
            clients = len(partition_sets)
            while offset < MAX_OPS_PER_CLIENT:
                if paced_rate is None:
                    sent = time.perf_counter()
                    if sent >= end:
                        break
                else:
                    sent = begin + (offset * clients + index) / paced_rate  # this commit's slot
                    if sent >= end:
                        break
                    wait = sent - time.perf_counter()
                    if wait > 0:
                        time.sleep(wait)
                offset += 1
                consumer.commit(offsets=[TopicPartition(topic, p, offset) for p in partitions], asynchronous=False)
                latencies.append(time.perf_counter() - sent)
            results[index] = (latencies, offset)
        except BaseException as error:  # noqa: BLE001
            results[index] = error

    threads = [threading.Thread(target=client, args=(index,), daemon=True) for index in range(len(partition_sets))]
    for thread in threads:
        thread.start()
    try:
        barrier.wait(timeout=60)
        started = start_at[0]
        for thread in threads:
            thread.join(timeout=seconds + 60)
        elapsed = time.perf_counter() - started
        if any(thread.is_alive() for thread in threads):
            raise BenchError(f"commit clients on {bootstrap} still running {seconds + 60:.0f}s after the start")
        total = Latencies(elapsed=elapsed)
        for index, result in enumerate(results):
            if isinstance(result, BaseException) or result is None:
                raise BenchError(f"commit client {index} on {bootstrap} failed: {result!r}")
            latencies, count = result
            total.seconds += latencies
            total.operations += count
            total.items += count * len(partition_sets[index])
            for partition in partition_sets[index]:
                last[partition] = count
        return total, last
    finally:
        for consumer in consumers:
            consumer.close()


def check_committed(bootstrap: str, topic: str, group: str, expected: dict[int, int]) -> None:
    """Every partition's committed offset is the last one its client committed."""
    consumer = new_consumer(bootstrap, group)
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in sorted(expected)], timeout=30)
        wrong = {tp.partition: tp.offset for tp in got if tp.error is not None or tp.offset != expected[tp.partition]}
        if wrong:
            raise BenchError(f"{bootstrap}: committed offsets of {group} differ from the last commits: "
                             f"{dict(list(wrong.items())[:5])} vs {dict(list(expected.items())[:5])}")
    finally:
        consumer.close()


def run_fetches(bootstrap: str, topic: str, group: str, partitions: list[int], seconds: float) -> Latencies:
    consumer = new_consumer(bootstrap, group)
    try:
        wanted = [TopicPartition(topic, p) for p in partitions]
        consumer.committed(wanted, timeout=30)  # connected, coordinator known
        result = Latencies()
        started = time.perf_counter()
        end = started + seconds
        while result.operations < MAX_OPS_PER_CLIENT:
            sent = time.perf_counter()
            if sent >= end:
                break
            got = consumer.committed(wanted, timeout=30)
            result.seconds.append(time.perf_counter() - sent)
            result.operations += 1
            result.items += len(got)
        result.elapsed = time.perf_counter() - started
        if any(tp.error is not None or tp.offset < 0 for tp in got):
            raise BenchError(f"{bootstrap}: committed() of {group} returned {got[:3]}...")
        return result
    finally:
        consumer.close()


# -------------------------------------------------------------------------------- client cases


@dataclass
class ClientResults:
    many: Latencies | None = None  # (a)
    batched: Latencies | None = None  # (b)
    batched_concurrent: Latencies | None = None  # (b) with --batch-clients clients at once
    paced: Latencies | None = None  # (c)
    fetch_one: Latencies | None = None  # (d)
    fetch_many: Latencies | None = None  # (d)


def broker_cpu_seconds(target) -> float | None:
    """The tidemark broker process's CPU seconds so far (user + system), or None (the mock runs
    in this process). CPU per commit holds on a shared machine where wall-clock times do not."""
    broker = getattr(target, "broker", None)
    process = getattr(broker, "process", None)
    if process is None:
        return None
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_note(before: float | None, target, operations: int) -> str:
    after = broker_cpu_seconds(target)
    if before is None or after is None or not operations:
        return ""
    return f", broker CPU {(after - before) * 1e6 / operations:,.0f} us/commit"


def run_client_cases(target, args, profiler: Profiler | None) -> ClientResults:
    results = ClientResults()
    tag = uuid.uuid4().hex[:8]
    seconds = args.seconds

    def topic(name: str, partitions: int) -> str:
        full = f"offsets-{name}-{tag}"
        got = target.create_topic(full, partitions, 30)
        if got != partitions:
            raise BenchError(f"{target.name}: {full} has {got} partitions, wanted {partitions}")
        return full

    def maybe_profile(label: str):
        return profiler.record(label) if profiler else contextlib.nullcontext()

    # (a) many clients, one partition each
    many_topic, many_group = topic("many", args.clients), f"bench-many-{tag}"
    cpu = broker_cpu_seconds(target)
    with maybe_profile("commit-many"):
        results.many, last = run_clients(target.bootstrap, many_topic, many_group,
                                         [[p] for p in range(args.clients)], seconds)
    check_committed(target.bootstrap, many_topic, many_group, last)
    console.print(f"  {target.name:8} (a) {args.clients} clients: {results.many.ops_per_s:,.0f} commits/s, "
                  f"p50 {results.many.p(0.5):.2f} ms, p99 {results.many.p(0.99):.2f} ms"
                  f"{cpu_note(cpu, target, results.many.operations)}")

    # (b) one client, many partitions per commit
    batch_topic, batch_group = topic("batch", args.batch_partitions), f"bench-batch-{tag}"
    cpu = broker_cpu_seconds(target)
    with maybe_profile("commit-batched"):
        results.batched, last = run_clients(target.bootstrap, batch_topic, batch_group,
                                            [list(range(args.batch_partitions))], seconds)
    check_committed(target.bootstrap, batch_topic, batch_group, last)
    console.print(f"  {target.name:8} (b) {args.batch_partitions} partitions/commit: "
                  f"{results.batched.items_per_s:,.0f} partition offsets/s ({results.batched.ops_per_s:,.0f} commits/s)"
                  f"{cpu_note(cpu, target, results.batched.operations)}")

    # (b) again with several such clients at once: group commit shares each fsync between them
    wide_topic = topic("batch-wide", args.batch_partitions * args.batch_clients)
    wide_group = f"bench-batch-wide-{tag}"
    sets = [list(range(i * args.batch_partitions, (i + 1) * args.batch_partitions)) for i in range(args.batch_clients)]
    with maybe_profile("commit-batched-wide"):
        results.batched_concurrent, last = run_clients(target.bootstrap, wide_topic, wide_group, sets, seconds)
    check_committed(target.bootstrap, wide_topic, wide_group, last)
    console.print(f"  {target.name:8} (b) {args.batch_clients} clients x {args.batch_partitions} partitions/commit: "
                  f"{results.batched_concurrent.items_per_s:,.0f} partition offsets/s")

    # (c) paced single-partition commits
    paced_topic, paced_group = topic("paced", args.paced_clients), f"bench-paced-{tag}"
    cpu = broker_cpu_seconds(target)
    with maybe_profile("commit-paced"):
        results.paced, _ = run_clients(target.bootstrap, paced_topic, paced_group,
                                       [[p] for p in range(args.paced_clients)], seconds, paced_rate=args.paced_rate)
    console.print(f"  {target.name:8} (c) paced {args.paced_rate:,.0f}/s: achieved {results.paced.ops_per_s:,.0f}/s, "
                  f"p50 {results.paced.p(0.5):.2f} ms, p99 {results.paced.p(0.99):.2f} ms"
                  f"{cpu_note(cpu, target, results.paced.operations)}")

    # (d) OffsetFetch of 1 and of all partitions of (b)'s group
    results.fetch_one = run_fetches(target.bootstrap, batch_topic, batch_group, [0], seconds / 2)
    results.fetch_many = run_fetches(target.bootstrap, batch_topic, batch_group,
                                     list(range(args.batch_partitions)), seconds / 2)
    console.print(f"  {target.name:8} (d) committed(): 1 partition p99 {results.fetch_one.p(0.99):.2f} ms, "
                  f"{args.batch_partitions} partitions p99 {results.fetch_many.p(0.99):.2f} ms")
    return results


# --------------------------------------------------------------------------- (e) loading, tidemark


@dataclass
class LoadResult:
    records: int
    seconds: float
    records_per_second: float
    write_seconds: float


def run_load(tmp: Path, records: int, profiler_dir: Path | None) -> LoadResult:
    """Write `records` offset commits into one offsets partition while the broker is down, restart
    it and read how fast that partition loaded from its `offsets_partition_loaded` log line."""
    group = "bench-load"
    broker = BrokerProcess(tmp / "load-data", TIDEMARK_SETTINGS).start()
    try:
        with RawClient(broker.bootstrap) as client:  # creates the offsets topic
            client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
        if broker.stop() != 0:
            raise BenchError(f"load broker did not stop cleanly:\n{broker.log_text()[-2000:]}")
    finally:
        broker.kill()

    index = partition_for(group, OFFSETS_PARTITIONS)
    written = time.perf_counter()
    log = UnifiedLog.open(broker.data_dir / f"__consumer_offsets-{index}",
                   LogConfig(segment_bytes=104857600, cleanup_policy="compact"), clean_shutdown=True)
    try:
        keys = [encode_key(OffsetCommitKey(group, "loaded", p)) for p in range(LOAD_KEYS)]
        for start in range(0, records, LOAD_BATCH):
            log.append(build_batch([
                (keys[i % LOAD_KEYS], encode_offset_commit_value(OffsetCommitValue(offset=i, commit_timestamp=1)), (), 1)
                for i in range(start, min(records, start + LOAD_BATCH))]), now_ms=1)
    finally:
        log.close()
    write_seconds = time.perf_counter() - written

    log_start = broker.log_path.stat().st_size if broker.log_path.exists() else 0
    restarted = BrokerProcess(broker.data_dir, TIDEMARK_SETTINGS).start()
    try:
        profiling = Profiler(profiler_dir, restarted.process.pid).record("load") if profiler_dir else contextlib.nullcontext()
        with profiling:
            deadline = time.monotonic() + max(60.0, records / 20_000)
            line = None
            while line is None:
                with open(restarted.log_path, "rb") as handle:
                    handle.seek(log_start)
                    for raw in handle.read().splitlines():
                        with contextlib.suppress(ValueError):
                            entry = json.loads(raw)
                            if entry.get("event") == "offsets_partition_loaded" and entry.get("partition") == index:
                                line = entry
                if line is None:
                    if time.monotonic() > deadline:
                        raise BenchError(f"partition {index} did not report offsets_partition_loaded in time")
                    time.sleep(0.1)
        if restarted.stop() != 0:
            raise BenchError(f"load broker did not stop cleanly:\n{restarted.log_text()[-2000:]}")
    finally:
        restarted.kill()
    if line["records"] != records:
        raise BenchError(f"partition {index} loaded {line['records']} records, wrote {records}")
    return LoadResult(line["records"], line["seconds"], line["records_per_second"] or float("nan"), write_seconds)


# ---------------------------------------------------------------------------- (f) memory, in-process


@dataclass
class MemoryResult:
    offsets: int
    traced_bytes_per_offset: float
    rss_bytes_per_offset: float
    replay_per_second: float


def _replay(shard: GroupCoordinatorShard, groups: int, partitions: int) -> None:
    """groups x partitions distinct offset commits, encoded one group at a time (the encoded
    records of a group are garbage once replayed)."""
    log_offset = 0
    value = encode_offset_commit_value(OffsetCommitValue(offset=42, commit_timestamp=1))
    for g in range(groups):
        group = f"bench-group-{g:05d}"
        keys = [encode_key(OffsetCommitKey(group, "orders", p)) for p in range(partitions)]
        for key in keys:
            shard.replay(log_offset, key, value, now_ms=1)
            log_offset += 1


def _new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: True)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def run_memory(groups: int, partitions: int) -> MemoryResult:
    count = groups * partitions
    # Untraced pass: RSS delta and the pure replay rate (no log reads, no broker).
    gc.collect()
    shard = _new_shard()
    rss_before = _rss_bytes()
    started = time.perf_counter()
    _replay(shard, groups, partitions)
    replay_seconds = time.perf_counter() - started
    gc.collect()
    rss_delta = _rss_bytes() - rss_before
    if shard.offsets.count() != count:
        raise BenchError(f"replayed {count} offsets, the shard caches {shard.offsets.count()}")
    del shard
    gc.collect()
    # Traced pass: what the cache itself holds (the temporaries are freed by then).
    tracemalloc.start()
    try:
        shard = _new_shard()
        before = tracemalloc.get_traced_memory()[0]
        _replay(shard, groups, partitions)
        gc.collect()
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    if shard.offsets.count() != count:
        raise BenchError(f"replayed {count} offsets, the shard caches {shard.offsets.count()}")
    return MemoryResult(count, traced / count, rss_delta / count, count / replay_seconds)


# ------------------------------------------------------------------------------------------ table


def _ms(value: float) -> str:
    return f"{value:.2f}"


def _goal_cells(case: str, value: float | None) -> list[str]:
    if case not in GOALS or value is None:
        return ["", ""]
    unit, goal, op = GOALS[case]
    met = value >= goal if op == ">=" else value <= goal
    shown = f"{goal:,}" if isinstance(goal, int) else f"{goal:g}"
    return [f"{op} {shown}", "[green]yes[/green]" if met else "[red]no[/red]"]


def results_table(client: dict[str, ClientResults], load: LoadResult | None, memory: MemoryResult | None,
                  args: argparse.Namespace, title: str) -> Table:
    names = list(client)
    table = Table(title=title, title_justify="left")
    table.add_column("case")
    table.add_column("metric")
    for name in ("tidemark", "mock"):
        table.add_column(name, justify="right")
    table.add_column("tidemark/mock", justify="right")
    if "tmpfs" in names:
        table.add_column("on tmpfs (no fsync cost)", justify="right")
        table.add_column("tmpfs/mock", justify="right")
    table.add_column("goal", justify="right")
    table.add_column("met", justify="center")

    def row(case_key: str, case: str, metric: str, pick, fmt, goal_value: bool = False) -> None:
        values = {name: pick(client[name]) for name in names}
        tidemark, mock = values.get("tidemark"), values.get("mock")
        ratio = f"{tidemark / mock:.2f}x" if tidemark is not None and mock else "-"
        cells = [fmt(tidemark) if tidemark is not None else "-", fmt(mock) if mock is not None else "-", ratio]
        if "tmpfs" in names:
            tmpfs = values["tmpfs"]
            cells += [fmt(tmpfs), f"{tmpfs / mock:.2f}x" if mock else "-"]
        table.add_row(case, metric, *cells, *(_goal_cells(case_key, tidemark) if goal_value else ["", ""]))

    blanks = ["", ""] if "tmpfs" in names else []
    count = lambda value: f"{value:,.0f}"  # noqa: E731
    if names:
        row("a", f"(a) {args.clients} clients x 1 partition", "commits/s", lambda r: r.many.ops_per_s, count)
        row("a", "", "commit p50 ms", lambda r: r.many.p(0.5), _ms)
        row("a", "", "commit p99 ms", lambda r: r.many.p(0.99), _ms)
        table.add_section()
        row("b", f"(b) 1 client x {args.batch_partitions} partitions", "partition offsets/s",
            lambda r: r.batched.items_per_s, count, goal_value=True)
        row("b", "", "commit p50 ms", lambda r: r.batched.p(0.5), _ms)
        row("b", "", "commit p99 ms", lambda r: r.batched.p(0.99), _ms)
        row("b", f"(b) {args.batch_clients} clients x {args.batch_partitions} partitions", "partition offsets/s",
            lambda r: r.batched_concurrent.items_per_s, count, goal_value=True)
        row("b", "", "commit p99 ms", lambda r: r.batched_concurrent.p(0.99), _ms)
        table.add_section()
        row("c", f"(c) paced {args.paced_rate:,.0f}/s, 1 partition", "achieved commits/s",
            lambda r: r.paced.ops_per_s, count)
        row("c", f"    ({args.paced_clients} clients)", "p50 ms (from schedule)", lambda r: r.paced.p(0.5), _ms)
        row("c", "", "p99 ms (from schedule)", lambda r: r.paced.p(0.99), _ms, goal_value=True)
        table.add_section()
        row("d", "(d) committed() 1 partition", "p50 ms", lambda r: r.fetch_one.p(0.5), _ms)
        row("d", "", "p99 ms", lambda r: r.fetch_one.p(0.99), _ms)
        row("d", f"(d) committed() {args.batch_partitions} partitions", "p50 ms", lambda r: r.fetch_many.p(0.5), _ms)
        row("d", "", "p99 ms", lambda r: r.fetch_many.p(0.99), _ms)
        table.add_section()
    if load is not None:
        table.add_row(f"(e) load {load.records:,} records", "records/s", f"{load.records_per_second:,.0f}", "-", "-",
                      *blanks, *_goal_cells("e", load.records_per_second))
        table.add_row("", "seconds", f"{load.seconds:.2f}", "-", "-", *blanks, "", "")
        table.add_section()
    if memory is not None:
        table.add_row(f"(f) {memory.offsets:,} cached offsets", "bytes/offset (tracemalloc)",
                      f"{memory.traced_bytes_per_offset:,.0f}", "-", "-", *blanks,
                      *_goal_cells("f", memory.traced_bytes_per_offset))
        table.add_row("", "bytes/offset (RSS delta)", f"{memory.rss_bytes_per_offset:,.0f}", "-", "-", *blanks, "", "")
        table.add_row("", "replay records/s (no I/O)", f"{memory.replay_per_second:,.0f}", "-", "-", *blanks, "", "")
    return table


# ------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.offsets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of each commit case (default 5)")
    parser.add_argument("--clients", type=int, default=20, help="(a) clients, one partition each (default 20)")
    parser.add_argument("--batch-partitions", type=int, default=100, help="(b)/(d) partitions per request")
    parser.add_argument("--batch-clients", type=int, default=8,
                        help="(b) clients committing --batch-partitions each, at once (default 8)")
    parser.add_argument("--paced-rate", type=float, default=1000.0, help="(c) commits/s in total (default 1000)")
    parser.add_argument("--paced-clients", type=int, default=10, help="(c) clients sharing the schedule")
    parser.add_argument("--load-records", type=int, default=1_000_000, help="(e) records in the offsets partition")
    parser.add_argument("--memory-groups", type=int, default=1_000, help="(f) groups (default 1000)")
    parser.add_argument("--memory-partitions", type=int, default=1_000, help="(f) partitions per group")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 s cases, 50,000 records to load, 50 x 1,000 offsets cached")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help="comma-separated subset of tidemark, tmpfs (the same broker with its data on "
                             "tmpfs, where fsync costs nothing) and mock")
    parser.add_argument("--skip", default="", help="comma-separated cases to skip: clients (a-d), load, memory")
    parser.add_argument("--profile", type=Path, metavar="DIR", help="py-spy the tidemark broker in (a), (b), (c), (e)")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = 1.0
        args.load_records = min(args.load_records, 50_000)
        args.memory_groups = min(args.memory_groups, 50)
    args.targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    args.skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    if set(args.targets) - set(TARGETS) or args.skip - {"clients", "load", "memory"}:
        parser.error("--targets takes tidemark, tmpfs and/or mock; --skip takes clients, load, memory")
    if "tmpfs" in args.targets and not MEMORY_DIR.is_dir():
        parser.error(f"--targets tmpfs needs {MEMORY_DIR}")
    if min(args.seconds, args.clients, args.batch_partitions, args.batch_clients, args.paced_rate, args.paced_clients,
           args.load_records, args.memory_groups, args.memory_partitions) <= 0:
        parser.error("counts, rates and durations must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_started = time.monotonic()
    client: dict[str, ClientResults] = {}
    load = memory = None
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-offsets-") as tmp:
        if "clients" not in args.skip:
            for name in args.targets:
                with console.status(f"{name}: commit and fetch cases"):
                    target = MockTarget() if name == "mock" else \
                        TidemarkOffsetsTarget(Path(tmp) if name == "tidemark" else MEMORY_DIR)
                    with contextlib.closing(target):
                        console.print(f"{name}: {target.bootstrap}")
                        # the tmpfs broker's profiles go to DIR/tmpfs (printed: DIR's, the disk-backed broker's)
                        profiler = None if not args.profile or name == "mock" else \
                            Profiler(args.profile if name == "tidemark" else args.profile / "tmpfs", target.pid)
                        client[name] = run_client_cases(target, args, profiler)
        if "load" not in args.skip and "tidemark" in args.targets:
            with console.status(f"tidemark: loading {args.load_records:,} offset records"):
                load = run_load(Path(tmp), args.load_records, args.profile)
            console.print(f"  tidemark (e) loaded {load.records:,} records in {load.seconds:.2f} s: "
                          f"{load.records_per_second:,.0f} records/s (writing them took {load.write_seconds:.1f} s)")
    if "memory" not in args.skip and "tidemark" in args.targets:
        with console.status(f"in-process: caching {args.memory_groups * args.memory_partitions:,} offsets"):
            # A fresh interpreter, so the RSS delta is not absorbed by memory earlier cases freed.
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                memory = pool.apply(run_memory, (args.memory_groups, args.memory_partitions))
        console.print(f"  tidemark (f) {memory.offsets:,} offsets: {memory.traced_bytes_per_offset:,.0f} B/offset "
                      f"traced, {memory.rss_bytes_per_offset:,.0f} B/offset RSS")

    title = (f"offset commit/fetch, {args.seconds:g} s per commit case, "
             f"{time.monotonic() - run_started:.0f} s total (tidemark: durable, fsync'd commits; tmpfs: the same, fsync free; mock: memory)")
    out.print(results_table(client, load, memory, args, title))
    if args.profile is not None:
        for label in ("commit-many", "commit-batched", "commit-batched-wide", "commit-paced", "load"):
            paths = sorted(args.profile.glob(f"{label}.txt"))
            if paths:
                out.print(summarize_profile(label, paths))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, KafkaException) as error:
        console.print(f"[red]benchmark failed: {error}")
        sys.exit(1)
