"""Produce/fetch throughput: tidemark next to librdkafka's built-in mock cluster, same workload.

    python -m bench.produce_fetch [--messages N] [--repeat R] [--quick] [--targets ...] [--profile DIR]

For each message size (100 B, 1 KiB) and acks (1, all) it produces N messages with confluent-kafka
(linger.ms=5, default batching, partitions round-robin) into fresh 6-partition topics, timed from
the first produce() to flush() returning, then reads them all back with a Consumer assign()ed at
offset 0 on every partition, timed until the last message arrives. The log must hold exactly the
records produced from offset 0, exactly that many messages and value bytes must be read, and every
wait is bounded. The best of --repeat runs is kept per case and phase.

The mock cluster keeps only ~5 MB per partition (older batches are dropped), so with it in the
run a case is split into rounds, one fresh topic each, small enough to be kept whole; every target
gets the same rounds and throughput is messages over the summed phase times.

Targets:
  tidemark  a broker process started here on 127.0.0.1 (free port, temporary data dir, defaults:
            writes go to disk and the high watermark follows the fsync'd group commit).
  mock      librdkafka's in-process mock cluster (1 broker, memory only): the reference. Topics
            are created with rd_kafka_mock_topic_create() through the librdkafka that
            confluent-kafka ships, since the mock answers no CreateTopics; when that library cannot
            be reached, the cluster comes from Producer({"test.mock.num.brokers": 1}) and topics
            are auto-created, and both targets then use the mock's auto-create partition count.

--cpu also reads, around every phase, the CPU time (/proc) of the tidemark broker process and of
this process's threads (the Python thread running the client loop, librdkafka's threads, the
mock's), and prints them per wall second of the phase: which side, if any, was busy.

--profile DIR also records the tidemark broker with py-spy during each of its phases (raw
collapsed stacks, one file per case, phase and round) and prints the top functions; profiled runs
are slower, so their throughput is not the number to quote.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)

SIZES = (100, 1024)
ACKS = (1, -1)
PARTITIONS = 6
# Sized so each produce case takes a few seconds on a small machine (2 shared cores).
DEFAULT_MESSAGES = {100: 2_000_000, 1024: 500_000}
QUICK_MESSAGES = 2_000
CONSUME_BATCH = 10_000
# The mock cluster keeps only ~5 MB per partition and drops older batches, so a case is split
# into rounds, each a fresh topic whose values stay under this many bytes per partition.
MOCK_RETAINED_VALUE_BYTES = 3_500_000
RECORD_OVERHEAD = 16

# Wide enough for the table and the progress lines when output goes to a file or a pipe.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
out = Console(width=None if sys.stdout.isatty() else 150)


class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------- targets


class TidemarkTarget:
    name = "tidemark"

    def __init__(self, tmp: Path) -> None:
        self.broker = BrokerProcess(tmp / "tidemark-data").start()
        self.bootstrap = self.broker.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    @property
    def pid(self) -> int:
        assert self.broker.process is not None
        return self.broker.process.pid

    def create_topic(self, topic: str, partitions: int, timeout: float) -> int:
        futures = self.admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                           operation_timeout=timeout, request_timeout=timeout)
        futures[topic].result(timeout)
        return _partition_count(self.bootstrap, topic, timeout)

    def close(self) -> None:
        self.admin = None  # destroy the client before its broker goes away (no reconnect noise)
        try:
            code = self.broker.stop()
            if code != 0:
                console.print(f"[yellow]tidemark exited with {code}; log:\n{self.broker.log_text()[-2000:]}")
        finally:
            self.broker.kill()


def _load_librdkafka() -> ctypes.CDLL | None:
    """The librdkafka confluent-kafka itself loaded (its wheel bundles one), else a system one."""
    import confluent_kafka

    package_dir = Path(confluent_kafka.__file__).resolve().parent
    candidates = sorted(glob.glob(str(package_dir.parent / "confluent_kafka.libs" / "librdkafka*.so*")))
    system = ctypes.util.find_library("rdkafka")
    if system:
        candidates.append(system)
    for candidate in candidates:
        try:
            lib = ctypes.CDLL(candidate)
            lib.rd_kafka_mock_topic_create  # noqa: B018  (raises AttributeError when not exported)
            return lib
        except (OSError, AttributeError):
            continue
    return None


class MockTarget:
    """librdkafka's mock cluster: one in-process broker keeping everything in memory."""

    name = "mock"

    def __init__(self) -> None:
        self._lib = _load_librdkafka()
        self._holder: Producer | None = None
        if self._lib is not None:
            self._start_with_ctypes()
        else:
            # Only the config property is reachable: topics are then auto-created by the mock.
            self._holder = Producer({"test.mock.num.brokers": 1, "log_level": 3})
            brokers = self._holder.list_topics(timeout=10).brokers
            broker = next(iter(brokers.values()))
            self.bootstrap = f"{broker.host}:{broker.port}"

    def _start_with_ctypes(self) -> None:
        lib = self._lib
        assert lib is not None
        lib.rd_kafka_conf_new.restype = ctypes.c_void_p
        lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                          ctypes.c_size_t]
        lib.rd_kafka_new.restype = ctypes.c_void_p
        lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
        lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
        lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # The handle only owns the cluster; it never connects anywhere, so keep it quiet.
        lib.rd_kafka_conf_set(conf, b"log_level", b"0", errstr, len(errstr))
        self._rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # 0 = RD_KAFKA_PRODUCER
        if not self._rk:
            raise BenchError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self._cluster = lib.rd_kafka_mock_cluster_new(self._rk, 1)
        if not self._cluster:
            lib.rd_kafka_destroy(self._rk)
            raise BenchError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def auto_create_partitions(self) -> int | None:
        """How many partitions a new topic gets, when topics cannot be created with a count."""
        if self._holder is None:
            return None
        return _partition_count(self.bootstrap, f"bench-probe-{uuid.uuid4().hex[:8]}", 10)

    def create_topic(self, topic: str, partitions: int, timeout: float) -> int:
        if self._holder is None:
            assert self._lib is not None
            err = self._lib.rd_kafka_mock_topic_create(self._cluster, topic.encode(), partitions, 1)
            if err != 0:
                raise BenchError(f"rd_kafka_mock_topic_create({topic}) failed with error {err}")
        return _partition_count(self.bootstrap, topic, timeout)  # auto-creates in the fallback

    def close(self) -> None:
        if self._holder is not None:
            self._holder.flush(1)
            self._holder = None
        elif self._lib is not None:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._lib.rd_kafka_destroy(self._rk)


def _partition_count(bootstrap: str, topic: str, timeout: float) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout
    while True:
        metadata = producer.list_topics(topic, timeout=max(0.5, deadline - time.monotonic()))
        entry = metadata.topics.get(topic)
        if entry is not None and entry.error is None and entry.partitions:
            return len(entry.partitions)
        if time.monotonic() >= deadline:
            raise BenchError(f"{topic} has no partitions on {bootstrap}: {entry and entry.error}")
        time.sleep(0.1)
    # (the producer is destroyed on return: it holds no messages)


# -------------------------------------------------------------------------------------- workload


@dataclass
class Phase:
    messages: int = 0
    bytes: int = 0
    seconds: float = 0.0

    def add(self, messages: int, nbytes: int, seconds: float) -> None:
        self.messages += messages
        self.bytes += nbytes
        self.seconds += seconds

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6


def round_sizes(total: int, size: int, partitions: int) -> list[int]:
    """Split a case into rounds (one fresh topic each) that the mock cluster keeps whole."""
    cap = partitions * max(1, MOCK_RETAINED_VALUE_BYTES // (size + RECORD_OVERHEAD))
    rounds = -(-total // cap)
    return [total // rounds + (1 if index < total % rounds else 0) for index in range(rounds)]


class Writer:
    """One producer for every round of a case: round-robin over the partitions, linger.ms=5."""

    def __init__(self, bootstrap: str, acks: int, size: int) -> None:
        self.errors: list[str] = []
        self.payload = os.urandom(size)
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "acks": str(acks),
            "linger.ms": 5,
            "delivery.report.only.error": True,
            "log_level": 3,
        })
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})

    def _on_delivery(self, err, _msg) -> None:  # only failures are reported
        if err is not None and len(self.errors) < 5:
            self.errors.append(str(err))

    def produce(self, topic: str, partitions: int, count: int, timeout: float) -> float:
        producer, payload, on_delivery = self.producer, self.payload, self._on_delivery
        producer.list_topics(topic, timeout=timeout)  # connected and leaders known before the clock starts
        deadline = time.monotonic() + timeout
        started = time.perf_counter()
        sent = 0
        while sent < count:
            try:
                producer.produce(topic, payload, partition=sent % partitions, on_delivery=on_delivery)
                sent += 1
            except BufferError:  # local queue full: serve delivery reports until there is room
                producer.poll(0.005)
                if time.monotonic() > deadline:
                    raise BenchError(f"produce to {topic}: only {sent}/{count} queued within {timeout}s")
        remaining = producer.flush(max(0.0, deadline - time.monotonic()))
        elapsed = time.perf_counter() - started
        if remaining:
            raise BenchError(f"produce to {topic}: {remaining} messages undelivered after {timeout}s")
        if self.errors:
            raise BenchError(f"produce to {topic}: delivery failed: {self.errors}")
        self._check_log(topic, partitions, count, timeout)
        return elapsed

    def _check_log(self, topic: str, partitions: int, count: int, timeout: float) -> None:
        """The log holds exactly what was produced, from offset 0: nothing lost, nothing doubled.

        With acks=1 tidemark acknowledges before the group commit's fsync, and the end offset (the
        high watermark) only moves after it, so wait (bounded) for it to catch up."""
        deadline = time.monotonic() + timeout
        while True:
            held = {}
            for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):
                futures = self.admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)},
                                                  request_timeout=timeout)
                held[name] = sum(future.result(timeout).offset for future in futures.values())
            if held["earliest"] == 0 and held["latest"] == count:
                return
            if held["earliest"] != 0 or held["latest"] > count or time.monotonic() > deadline:
                raise BenchError(f"produce to {topic}: log offsets sum to {held['earliest']}..{held['latest']}, "
                                 f"produced {count}")
            time.sleep(0.01)

    def close(self) -> None:
        self.producer.flush(1)
        self.admin = None


class Reader:
    """One consumer for every round of a case: assign() at offset 0, no group membership."""

    def __init__(self, bootstrap: str, size: int) -> None:
        self.size = size
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",  # never joined: assign() only, no commits
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            "log_level": 3,
        })

    def fetch(self, topic: str, partitions: int, count: int, timeout: float) -> float:
        consumer = self.consumer
        assignment = [TopicPartition(topic, partition, 0) for partition in range(partitions)]
        consumer.list_topics(topic, timeout=timeout)  # connected and leaders known before the clock starts
        received = 0
        received_bytes = 0
        deadline = time.monotonic() + timeout
        started = time.perf_counter()
        consumer.assign(assignment)
        while received < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"fetch from {topic}: {received}/{count} messages within {timeout}s")
            # Never ask for more than is missing: consume() waits for a full batch or the timeout.
            batch = consumer.consume(num_messages=min(CONSUME_BATCH, count - received), timeout=min(0.5, left))
            for message in batch:
                if message.error() is not None:
                    raise BenchError(f"fetch from {topic}: {message.error()}")
                received_bytes += len(message.value())
            received += len(batch)
        elapsed = time.perf_counter() - started
        consumer.unassign()
        if received != count or received_bytes != count * self.size:
            raise BenchError(f"fetch from {topic}: read {received} messages / {received_bytes} bytes, "
                             f"produced {count} / {count * self.size}")
        return elapsed

    def close(self) -> None:
        self.consumer.close()


# ------------------------------------------------------------------------------------- profiling


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(stat_path: str) -> float:
    """utime + stime of a process or thread, from its /proc stat line."""
    fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def _thread_group(name: str) -> str:
    if name.startswith("rdk:mock"):
        return "mock (rdk:mock)"
    if name.startswith("rdk:"):
        return "librdkafka client threads"
    return "Python threads"


class CpuMeter:
    """CPU seconds per phase of the tidemark broker process and of this process's threads
    (grouped as Python, librdkafka's client threads, the mock's), from /proc."""

    def __init__(self) -> None:
        self.totals: dict[tuple[str, str], Counter[str]] = {}

    def _threads(self) -> dict[str, float]:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError, IndexError, ValueError):
                name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
                out[f"{tid} {name}"] = _cpu_seconds(f"/proc/self/task/{tid}/stat")
        return out

    @contextlib.contextmanager
    def record(self, target: str, phase: str, broker_pid: int | None):
        broker_before = _cpu_seconds(f"/proc/{broker_pid}/stat") if broker_pid else 0.0
        threads_before = self._threads()
        started = time.perf_counter()
        yield
        wall = time.perf_counter() - started
        threads_after = self._threads()
        total = self.totals.setdefault((target, phase), Counter())
        total["wall"] += wall
        if broker_pid:
            total["tidemark broker process"] += _cpu_seconds(f"/proc/{broker_pid}/stat") - broker_before
        for key, seconds in threads_after.items():
            total[_thread_group(key.split(" ", 1)[1])] += seconds - threads_before.get(key, 0.0)

    def table(self) -> Table:
        groups = ["tidemark broker process", "Python threads", "librdkafka client threads", "mock (rdk:mock)"]
        table = Table(title="CPU seconds per wall second of each phase (all rounds)", title_justify="left")
        table.add_column("target, phase")
        for group in groups:
            table.add_column(group, justify="right")
        for (target, phase), total in sorted(self.totals.items()):
            table.add_row(f"{target}, {phase}", *(f"{total[group] / total['wall']:.2f}" if group in total else "-"
                                                   for group in groups))
        return table


class Profiler:
    """py-spy recording a process (and, with subprocesses, its descendants) during one phase,
    raw collapsed stacks to a file per phase."""

    def __init__(self, directory: Path, pid: int, *, subprocesses: bool = False) -> None:
        self.directory = directory
        self.pid = pid
        self.subprocesses = subprocesses
        self.binary = find_py_spy()
        directory.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def record(self, label: str):
        output = self.directory / f"{label}.txt"
        process = subprocess.Popen(
            [self.binary, "record", "--pid", str(self.pid), *(["--subprocesses"] if self.subprocesses else []),
             "--rate", "200", "--format", "raw", "--nonblocking", "--output", str(output)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(2.0 if self.subprocesses else 1.0)  # let py-spy attach before the phase starts
        try:
            yield output
        finally:
            process.send_signal(signal.SIGINT)
            try:
                _, stderr = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                _, stderr = process.communicate()
            if not output.exists():
                console.print(f"[yellow]py-spy wrote no {output.name}: {stderr.decode(errors='replace')[-500:]}")


def find_py_spy() -> str:
    beside_python = Path(sys.executable).parent / "py-spy"
    binary = str(beside_python) if beside_python.exists() else shutil.which("py-spy")
    if binary is None:
        raise BenchError("--profile needs py-spy (pip install py-spy), beside this Python or on PATH")
    return binary


def summarize_profile(title: str, paths: list[Path], top: int = 15) -> Table:
    """Self and inclusive share of the broker's busy samples, per function, over some recordings."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    lines = [line for path in paths for line in path.read_text().splitlines()]
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [frame for frame in stack.split(";") if frame and not frame.startswith("process ")
                  and not frame.startswith("thread ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    table = Table(title=f"tidemark broker, {title}: {total} busy samples", title_justify="left")
    table.add_column("self %", justify="right")
    table.add_column("incl %", justify="right")
    table.add_column("function (file:line)")
    for frame, count in own.most_common(top) if total else []:
        table.add_row(f"{100 * count / total:.1f}", f"{100 * inclusive[frame] / total:.1f}", _short(frame))
    return table


def _short(frame: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in frame:
            head, _, tail = frame.partition("(")
            return f"{head}({tail.split(marker, 1)[-1]}" if marker != "/lib/python3" else f"{head}(stdlib)"
    return frame


# ------------------------------------------------------------------------------------------ main


@dataclass
class CaseResult:
    produce: dict[str, Phase] = field(default_factory=dict)
    fetch: dict[str, Phase] = field(default_factory=dict)


def _best(current: Phase | None, new: Phase) -> Phase:
    return new if current is None or new.msgs_per_s > current.msgs_per_s else current


def _acks_label(acks: int) -> str:
    return "all" if acks == -1 else str(acks)


def results_table(results: dict[tuple[int, int], CaseResult], targets: list[str], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("phase")
    table.add_column("case (size, acks)")
    for name in targets:
        table.add_column(f"{name} msgs/s", justify="right")
        table.add_column(f"{name} MB/s", justify="right")
    if len(targets) == 2:
        table.add_column(f"{targets[0]}/{targets[1]}", justify="right")
    for phase_name in ("produce", "fetch"):
        for (size, acks), result in results.items():
            phases = getattr(result, phase_name)
            row = [phase_name, f"{size} B, acks={_acks_label(acks)}"]
            for name in targets:
                phase = phases.get(name)
                row += [f"{phase.msgs_per_s:,.0f}", f"{phase.mb_per_s:.1f}"] if phase else ["-", "-"]
            if len(targets) == 2:
                first, second = (phases.get(name) for name in targets)
                if first and second:
                    ratio = first.msgs_per_s / second.msgs_per_s
                    style = "green" if ratio >= 0.7 else "red"
                    row.append(f"[{style}]{ratio:.2f}x[/{style}]")
                else:
                    row.append("-")
            table.add_row(*row)
        if phase_name == "produce":
            table.add_section()
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.produce_fetch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, help="messages per case (default: %s)" %
                        ", ".join(f"{count:,} at {size} B" for size, count in DEFAULT_MESSAGES.items()))
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the best is kept (default 1)")
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {QUICK_MESSAGES:,} messages per case")
    parser.add_argument("--timeout", type=float, default=60.0, help="bound on each produce or fetch phase (s)")
    parser.add_argument("--targets", default="tidemark,mock", help="comma-separated subset of tidemark,mock")
    parser.add_argument("--cpu", action="store_true",
                        help="print the broker's and this process's threads' CPU per wall second of each phase")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="record the tidemark broker with py-spy during each phase into DIR")
    args = parser.parse_args(argv)
    args.targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    if not args.targets or set(args.targets) - {"tidemark", "mock"}:
        parser.error("--targets takes tidemark, mock or both")
    if args.repeat < 1 or (args.messages is not None and args.messages < 1):
        parser.error("--repeat and --messages must be positive")
    return args


def run_case(target: TidemarkTarget | MockTarget, size: int, acks: int, rounds: list[int], partitions: int,
             timeout: float, profiler: Profiler | None, on_round,
             cpu: CpuMeter | None = None) -> tuple[Phase, Phase]:
    produced, fetched = Phase(), Phase()
    label = f"{size}B-acks{_acks_label(acks)}"
    writer = Writer(target.bootstrap, acks, size)
    reader = Reader(target.bootstrap, size)
    broker_pid = target.pid if isinstance(target, TidemarkTarget) else None

    def metered(phase: str):
        return cpu.record(target.name, f"{label}-{phase}", broker_pid) if cpu else contextlib.nullcontext()

    try:
        for index, count in enumerate(rounds):
            topic = f"bench-{label}-{uuid.uuid4().hex[:8]}"
            got = target.create_topic(topic, partitions, timeout)
            if got != partitions:
                raise BenchError(f"{target.name}: {topic} has {got} partitions, wanted {partitions}")
            with profiler.record(f"{label}-produce-r{index}") if profiler else contextlib.nullcontext(), \
                    metered("produce"):
                produced.add(count, count * size, writer.produce(topic, partitions, count, timeout))
            with profiler.record(f"{label}-fetch-r{index}") if profiler else contextlib.nullcontext(), \
                    metered("fetch"):
                fetched.add(count, count * size, reader.fetch(topic, partitions, count, timeout))
            on_round()
    finally:
        writer.close()
        reader.close()
    return produced, fetched


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def count_for(size: int) -> int:
        if args.messages is not None:
            return args.messages
        return QUICK_MESSAGES if args.quick else DEFAULT_MESSAGES[size]

    cases = [(size, acks) for size in SIZES for acks in ACKS]
    results: dict[tuple[int, int], CaseResult] = {case: CaseResult() for case in cases}
    run_started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp, contextlib.ExitStack() as stack:
        targets: dict[str, TidemarkTarget | MockTarget] = {}
        partitions = PARTITIONS
        with console.status("starting targets"):
            if "mock" in args.targets:
                mock = stack.enter_context(contextlib.closing(MockTarget()))
                targets["mock"] = mock
                auto = mock.auto_create_partitions()
                if auto is not None and auto != partitions:
                    console.print(f"[yellow]mock cluster auto-creates topics with {auto} partitions "
                                  f"(no CreateTopics): every target uses {auto}")
                    partitions = auto
            if "tidemark" in args.targets:
                targets["tidemark"] = stack.enter_context(contextlib.closing(TidemarkTarget(Path(tmp))))
            targets = {name: targets[name] for name in args.targets}
        profiler = None
        if args.profile is not None and "tidemark" in targets:
            profiler = Profiler(args.profile, targets["tidemark"].pid)  # type: ignore[union-attr]
        cpu = CpuMeter() if args.cpu else None
        for name, target in targets.items():
            console.print(f"{name}: {target.bootstrap}")

        # Without the mock in the run nothing needs splitting: one topic per case.
        plan = {size: round_sizes(count_for(size), size, partitions) if "mock" in targets else [count_for(size)]
                for size in SIZES}
        for size, rounds in plan.items():
            console.print(f"{size} B: {sum(rounds):,} messages per case in {len(rounds)} round(s) of "
                          f"~{rounds[0]:,} (one fresh {partitions}-partition topic each)")
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=console)
        with progress:
            overall = progress.add_task("benchmark", total=sum(len(plan[size]) for size, _ in cases)
                                        * len(targets) * args.repeat)
            for size, acks in cases:
                for run in range(args.repeat):
                    for name, target in targets.items():
                        desc = f"{name:8} {size:>5} B acks={_acks_label(acks):3} run {run + 1}/{args.repeat}"
                        progress.update(overall, description=desc)
                        produced, fetched = run_case(
                            target, size, acks, plan[size], partitions, args.timeout,
                            profiler if name == "tidemark" else None, lambda: progress.advance(overall), cpu)
                        result = results[(size, acks)]
                        result.produce[name] = _best(result.produce.get(name), produced)
                        result.fetch[name] = _best(result.fetch.get(name), fetched)
                        progress.console.print(
                            f"  {desc}: produce {produced.msgs_per_s:>10,.0f} msgs/s {produced.mb_per_s:6.1f} MB/s"
                            f" | fetch {fetched.msgs_per_s:>10,.0f} msgs/s {fetched.mb_per_s:6.1f} MB/s")

    counts = ", ".join(f"{count_for(size):,} x {size} B" for size in SIZES)
    title = (f"produce/fetch, {partitions} partitions, {counts} per case, best of {args.repeat}, "
             f"{time.monotonic() - run_started:.0f} s total (MB = 10^6 bytes of values)")
    out.print(results_table(results, list(targets), title))
    if cpu is not None:
        out.print(cpu.table())
    if profiler is not None:
        for size, acks in cases:
            for phase_name in ("produce", "fetch"):
                label = f"{size}B-acks{_acks_label(acks)}-{phase_name}"
                paths = sorted(args.profile.glob(f"{label}-r*.txt"))
                out.print(summarize_profile(label, paths))
        out.print(summarize_profile("all phases", sorted(args.profile.glob("*-r*.txt"))))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, KafkaException) as error:
        console.print(f"[red]benchmark failed: {error}")
        sys.exit(1)
