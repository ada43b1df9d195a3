"""tidemark's PySpark topic source (format "tidemark") next to a plain confluent-kafka consumer loop.

    python -m bench.spark_source [--records N] [--repeat R] [--kafka KEY=VALUE ...] [--compare-sources]
                                 [--profile DIR]

Setup (not timed): a tidemark broker started here (free loopback port, temporary data dir), one
--partitions topic (default 4), --records records (default 1,000,000; 100-byte values, small keys)
produced with a confluent-kafka Producer (acks=1, linger.ms=20, large batches), and the log checked to
hold exactly that many records from offset 0. A small warm-up topic is written too.

Contestants, all reading the whole topic from offset 0 on the same broker, each run --repeat times
(the best run is reported):
  plain     one confluent-kafka Consumer, assign()ed every partition at offset 0, consume() of up to
            10,000 messages at a time (never more than are still missing) until every partition is at
            its end offset, summing len(value) of every message: the baseline.
  batch     spark.read.format("tidemark") ... .load().agg(count(*), sum(length(value))).collect() on a
            local[2] SparkSession; the count must equal --records and the length sum the plain loop's.
  stream    spark.readStream.format("tidemark") with startingOffsets=earliest, trigger(availableNow=True)
            into format "noop", a fresh temporary checkpoint each run, timed from start() to the end of
            awaitTermination(); the numInputRows of its progress reports must sum to --records.

The SparkSession is created once, before any timing, and one small batch read and one small
streaming query over the warm-up topic run first, so JVM start-up, the Python workers' start-up and
the first-query planning are not counted. The ratio column is records/s over the plain loop's
records/s (goal for the Spark source: >= 0.5x). Each run's progress line shows the 1-minute load
average: other work on the machine slows the Spark contestants (which keep two cores busy: the JVM
and two Python workers) more than the plain loop (one).

--kafka KEY=VALUE (repeatable) sets a librdkafka consumer property on every contestant alike: the
plain loop's Consumer gets KEY=VALUE, the Spark source the option kafka.KEY=VALUE (which it passes to
its consumers). By default every contestant runs fetch.queue.backoff.ms=10, which the Spark source
sets on its own consumers: librdkafka's default of 1000 ms means a partition whose local queue holds
queued.min.messages (100,000) is not fetched again for a second, which bounds a fast reader.
--compare-sources then runs availableNow queries of --repeat rounds (after one warm-up round) of the
warm-up topic's size from Spark's parquet file source, a trivial Python streaming source and the
"tidemark" source, interleaved on the same session, and reports each one's query time, Spark's
triggerExecution, and the rest (query start, the Python planner process, the last trigger): what
Spark costs per query, what the Python data source API adds, and what tidemark adds.
--profile DIR records this process and all its children (the broker, the JVM's pyspark.daemon Python
workers, the driver) with py-spy (--subprocesses) during one extra Spark batch read, writes the raw
collapsed stacks to DIR and prints the top functions per process kind; that read is not timed. With
the stream contestant it also records --repeat availableNow queries of the warm-up topic (the
streaming planner, a fresh interpreter per query, shows up as its own kind).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from rich.table import Table

from bench.produce_fetch import (
    BenchError,
    Profiler,
    TidemarkTarget,
    console,
    find_py_spy,
    out,
)

DEFAULT_RECORDS = 1_000_000
DEFAULT_PARTITIONS = 4
VALUE_SIZE = 100
WARMUP_RECORDS = 20_000
CONSUME_BATCH = 10_000
SOURCE_FORMAT = "tidemark"

PLAIN, BATCH, STREAM = "plain loop", "Spark batch", "Spark streaming"
CONTESTANTS = {"plain": PLAIN, "batch": BATCH, "stream": STREAM}


@dataclass
class Run:
    records: int
    seconds: float

    @property
    def per_s(self) -> float:
        return self.records / self.seconds


# ------------------------------------------------------------------------------------------ setup


def produce(bootstrap: str, topic: str, partitions: int, count: int, timeout: float, label: str) -> None:
    """count records, 100-byte values and keys "k<n>", round-robin over the partitions."""
    errors: list[str] = []

    def on_delivery(err, _msg) -> None:  # only failures are reported
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "acks": "1",
        "linger.ms": 20,
        "batch.num.messages": 100_000,
        "batch.size": 4 * 1024 * 1024,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1024 * 1024,
        "compression.type": "none",
        "delivery.report.only.error": True,
        "log_level": 3,
    })
    payload = os.urandom(VALUE_SIZE)
    deadline = time.monotonic() + timeout
    step = 10_000
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task(label, total=count)
        for sent in range(count):
            key = b"k%d" % (sent % 10_000)
            while True:
                try:
                    producer.produce(topic, payload, key, partition=sent % partitions, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: serve delivery reports until there is room
                    producer.poll(0.005)
                    if time.monotonic() > deadline:
                        raise BenchError(f"produce to {topic}: only {sent}/{count} queued within {timeout}s")
            if sent % step == step - 1:
                producer.poll(0)
                progress.update(task, completed=sent + 1)
        remaining = producer.flush(max(0.0, deadline - time.monotonic()))
        progress.update(task, completed=count)
    if remaining:
        raise BenchError(f"produce to {topic}: {remaining} messages undelivered after {timeout}s")
    if errors:
        raise BenchError(f"produce to {topic}: delivery failed: {errors}")


def end_offsets(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> dict[int, int]:
    """Each partition's end offset, once the log holds exactly what was produced from offset 0.

    With acks=1 tidemark acknowledges before the group commit's fsync and the high watermark
    follows the fsync, so wait (bounded) for it to catch up."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + timeout
    while True:
        held: dict[str, dict[int, int]] = {}
        for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):
            futures = admin.list_offsets({TopicPartition(topic, p): spec for p in range(partitions)},
                                         request_timeout=timeout)
            held[name] = {tp.partition: future.result(timeout).offset for tp, future in futures.items()}
        low, high = sum(held["earliest"].values()), sum(held["latest"].values())
        if low == 0 and high == expected:
            return held["latest"]
        if low != 0 or high > expected or time.monotonic() > deadline:
            raise BenchError(f"{topic}: log offsets sum to {low}..{high}, produced {expected}")
        time.sleep(0.05)


# ------------------------------------------------------------------------------------ contestants


def plain_loop(bootstrap: str, topic: str, ends: dict[int, int], kafka_options: dict[str, str],
               timeout: float) -> tuple[Run, int]:
    """One Consumer over every partition from offset 0 to its end; returns the run and sum(len(value)).

    The topic has no offset gaps (checked after producing: every partition runs from 0 and the end
    offsets add up to the records produced), so once sum(ends) records have arrived every partition
    is at its end; consumer.position() confirms it afterwards. Each consume() asks for no more than
    the records still missing: librdkafka's consume(num_messages=n) returns early only when n
    messages are there, so asking for more than remain would wait out its timeout at the end."""
    consumer = Consumer({
        **kafka_options,
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:8]}",  # never joined: assign() only, no commits
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "log_level": 3,
    })
    try:
        consumer.list_topics(topic, timeout=timeout)  # connected and leaders known before the clock starts
        assignment = [TopicPartition(topic, p, 0) for p in sorted(ends)]
        expected = sum(ends.values())
        records = value_bytes = 0
        deadline = time.monotonic() + timeout
        started = time.perf_counter()
        consumer.assign(assignment)
        while records < expected:
            messages = consumer.consume(num_messages=min(CONSUME_BATCH, expected - records), timeout=1.0)
            for message in messages:
                if message.error() is not None:
                    raise KafkaException(message.error())
                value_bytes += len(message.value())
            records += len(messages)
            if time.monotonic() > deadline:
                raise BenchError(f"plain loop: {records:,} of {expected:,} records after {timeout}s")
        elapsed = time.perf_counter() - started
        positions = {tp.partition: tp.offset for tp in consumer.position(assignment)}
        if positions != ends:
            raise BenchError(f"plain loop: read {records:,} records but stands at {positions}, ends are {ends}")
    finally:
        consumer.close()
    return Run(records, elapsed), value_bytes


class SparkBench:
    """One local[2] SparkSession with the "tidemark" format registered, for every Spark contestant."""

    def __init__(self, bootstrap: str, kafka_options: dict[str, str], tmp: Path) -> None:
        # Python workers must run this interpreter, the one with tidemark and confluent-kafka.
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        self.bootstrap = bootstrap
        self.kafka_options = kafka_options
        self.tmp = tmp
        self.spark = (
            SparkSession.builder.master("local[2]")
            .appName("tidemark-bench-spark-source")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        self.last_durations: list[dict] = []
        self.registered_with = register_format(self.spark)

    def _options(self, reader, topic: str):
        reader = reader.format(SOURCE_FORMAT).option("bootstrap.servers", self.bootstrap).option("subscribe", topic)
        for key, value in self.kafka_options.items():
            reader = reader.option(f"kafka.{key}", value)
        return reader

    def batch(self, topic: str) -> tuple[Run, int]:
        from pyspark.sql import functions as F

        started = time.perf_counter()
        row = (self._options(self.spark.read, topic).load()
               .agg(F.count("*").alias("records"), F.sum(F.length("value")).alias("value_bytes"))
               .collect()[0])
        elapsed = time.perf_counter() - started
        return Run(row["records"], elapsed), row["value_bytes"] or 0

    def stream(self, topic: str, timeout: float, frame=None) -> Run:
        """An availableNow query of the topic (or of `frame`, another streaming source) into noop."""
        checkpoint = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=self.tmp))
        try:
            if frame is None:
                frame = self._options(self.spark.readStream, topic).option("startingOffsets", "earliest").load()
            started = time.perf_counter()
            query = (frame.writeStream.format("noop").trigger(availableNow=True)
                     .option("checkpointLocation", str(checkpoint)).start())
            try:
                if not query.awaitTermination(timeout):
                    raise BenchError(f"Spark streaming: not done after {timeout}s")
                elapsed = time.perf_counter() - started
                records = sum(progress["numInputRows"] for progress in query.recentProgress)
                # Spark's own split of each micro-batch with data (one for the whole range, expected).
                self.last_durations = [p["durationMs"] for p in query.recentProgress if p["numInputRows"]]
            finally:
                query.stop()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
        return Run(records, elapsed)

    def close(self) -> None:
        self.spark.stop()


class CountingSource(DataSource):
    """A Python streaming source with nothing to do: WARMUP_RECORDS integers in one partition. What
    every availableNow query of a Python data source pays, whatever the source does."""

    @classmethod
    def name(cls) -> str:
        return "bench-counting"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema):
        return CountingReader()


class CountingReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def initialOffset(self) -> dict:
        return {"n": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def latestOffset(self, start: dict, limit) -> dict:
        return {"n": WARMUP_RECORDS}

    def partitions(self, start: dict, end: dict) -> list:
        return [InputPartition(0)] if end["n"] > start["n"] else []

    def read(self, partition):
        for n in range(WARMUP_RECORDS):
            yield (n,)


def compare_sources(spark: SparkBench, topic: str, repeat: int, timeout: float) -> Table:
    """availableNow queries of WARMUP_RECORDS rows from Spark's parquet file source, the trivial
    Python source above and the "tidemark" source, interleaved on one session: Spark's fixed cost per
    query, then what the Python data source API adds, then what tidemark adds."""
    session = spark.spark
    session.dataSource.register(CountingSource)
    files = spark.tmp / "compare-parquet"
    session.range(WARMUP_RECORDS).write.parquet(str(files))
    schema = session.read.parquet(str(files)).schema
    kinds = {
        "parquet files (Spark's own)": lambda: session.readStream.schema(schema).parquet(str(files)),
        "trivial Python source": lambda: session.readStream.format(CountingSource.name()).load(),
        "tidemark": lambda: spark._options(session.readStream, topic).option("startingOffsets", "earliest").load(),
    }
    measured: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    for attempt in range(repeat + 1):  # the first round warms each path up and is not counted
        for kind, frame in kinds.items():
            run = spark.stream(topic, timeout, frame())
            if run.records != WARMUP_RECORDS:
                raise BenchError(f"{kind}: {run.records} rows, expected {WARMUP_RECORDS}")
            trigger = sum(d.get("triggerExecution", 0) for d in spark.last_durations) / 1000
            if attempt:
                measured[kind].append((run.seconds, trigger))
            console.print(f"  {kind:28} {'warm-up' if not attempt else f'run {attempt}/{repeat}'}: "
                          f"{run.seconds:.2f} s, triggerExecution {trigger:.2f} s "
                          f"(load average {os.getloadavg()[0]:.1f})")
    table = Table(title=f"availableNow queries of {WARMUP_RECORDS:,} rows on one local[2] session, median of "
                        f"{repeat}, interleaved", title_justify="left")
    for column in ("source", "query s", "triggerExecution s", "outside the trigger s", "runs s"):
        table.add_column(column, justify="left" if column == "source" else "right")
    for kind, runs in measured.items():
        total = statistics.median(r[0] for r in runs)
        trigger = statistics.median(r[1] for r in runs)
        outside = statistics.median(r[0] - r[1] for r in runs)
        table.add_row(kind, f"{total:.2f}", f"{trigger:.2f}", f"{outside:.2f}", " ".join(f"{r[0]:.2f}" for r in runs))
    return table


def register_format(spark) -> str:
    """tidemark.spark.register(spark), or the topic source alone when that fails (a module mid-edit)."""
    try:
        from tidemark.spark import register

        register(spark)
        return "tidemark.spark.register"
    except Exception as error:  # noqa: BLE001  (any import or registration failure: fall back)
        console.print(f"[yellow]tidemark.spark.register failed ({type(error).__name__}: {error}); "
                      "registering TidemarkDataSource alone")
        from tidemark.spark.source import TidemarkDataSource

        spark.dataSource.register(TidemarkDataSource)
        return "TidemarkDataSource"


# ------------------------------------------------------------------------------------- profiling


# Matched in order against a process's command line (planner workers are forked by pyspark.daemon too).
_PROCESS_KINDS = (("python_streaming_source_runner", "streaming planner (a fresh interpreter per query)"),
                  ("pyspark.sql.worker", "Python planner workers (pyspark.sql.worker.*)"),
                  ("pyspark.daemon", "Python task workers (pyspark.daemon)"), ("tidemark.cli", "broker"),
                  ("", "driver (this process) and others"))


def _process_kind(frame: str) -> str:
    for marker, kind in _PROCESS_KINDS:
        if marker in frame:
            return kind
    return _PROCESS_KINDS[-1][1]


def _short(frame: str) -> str:
    head, _, tail = frame.partition(" (")
    tail = re.sub(r"^.*?(site-packages/|/src/)", "", tail)
    tail = re.sub(r"^.*/lib/python3[^/]*/", "stdlib/", tail)
    return f"{head} ({tail}" if tail else head


def summarize_profile(path: Path, top: int = 12) -> list[Table]:
    """Per process kind: self and inclusive share of its busy samples, per function."""
    own: dict[str, Counter[str]] = {}
    inclusive: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        parts = stack.split(";")
        processes = [f for f in parts if f.startswith("process ")]  # outermost first: the last one ran it
        kind = _process_kind(processes[-1]) if processes else _PROCESS_KINDS[-1][1]
        frames = [_short(f) for f in parts if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        totals[kind] += count
        own.setdefault(kind, Counter())[frames[-1]] += count
        for frame in set(frames):
            inclusive.setdefault(kind, Counter())[frame] += count
    grand = sum(totals.values())
    tables = []
    for kind, total in totals.most_common():
        table = Table(title=f"{kind}: {total} busy samples ({100 * total / grand:.0f}% of all, 200 Hz)",
                      title_justify="left")
        table.add_column("self %", justify="right")
        table.add_column("incl %", justify="right")
        table.add_column("function (file:line)")
        for frame, count in own[kind].most_common(top):
            table.add_row(f"{100 * count / total:.1f}", f"{100 * inclusive[kind][frame] / total:.1f}", frame)
        tables.append(table)
    return tables


# ------------------------------------------------------------------------------------------ main


def results_table(best: dict[str, Run], runs: dict[str, list[Run]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("contestant")
    table.add_column("records", justify="right")
    table.add_column("seconds (best)", justify="right")
    table.add_column("records/s", justify="right")
    table.add_column("ratio to plain loop", justify="right")
    table.add_column("median s", justify="right")
    table.add_column("median ratio", justify="right")
    table.add_column("all runs (s)", justify="right")
    baseline = best.get(PLAIN)
    medians = {name: statistics.median(r.seconds for r in rs) for name, rs in runs.items()}

    def ratio(name: str, seconds: float, base: float | None) -> str:
        if base is None:
            return "-"
        if name == PLAIN:
            return "1.00x"
        value = base / seconds  # same record count: the ratio of records/s
        style = "green" if value >= 0.5 else "red"
        return f"[{style}]{value:.2f}x[/{style}]"

    for name, run in best.items():
        table.add_row(name, f"{run.records:,}", f"{run.seconds:.2f}", f"{run.per_s:,.0f}",
                      ratio(name, run.seconds, baseline and baseline.seconds), f"{medians[name]:.2f}",
                      ratio(name, medians[name], medians.get(PLAIN)), " ".join(f"{r.seconds:.2f}" for r in runs[name]))
    return table


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_source", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS,
                        help=f"records in the topic (default {DEFAULT_RECORDS:,})")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS,
                        help=f"partitions of the topic (default {DEFAULT_PARTITIONS})")
    parser.add_argument("--repeat", type=int, default=2, help="runs per contestant; the best is kept (default 2)")
    parser.add_argument("--contestants", default="plain,batch,stream",
                        help="comma-separated subset of plain,batch,stream (default all)")
    parser.add_argument("--kafka", action="append", default=[], metavar="KEY=VALUE",
                        help="librdkafka consumer property for every contestant (repeatable)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on each phase (s)")
    parser.add_argument("--compare-sources", action="store_true",
                        help="also run availableNow queries of Spark's parquet file source, a trivial Python "
                             "source and tidemark over the warm-up topic, interleaved (the fixed cost per query)")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="py-spy one extra (untimed) Spark batch read into DIR and print the top functions")
    args = parser.parse_args(argv)
    if args.records < 1 or args.repeat < 1 or args.partitions < 1:
        parser.error("--records, --repeat and --partitions must be positive")
    args.contestants = [name.strip() for name in args.contestants.split(",") if name.strip()]
    if not args.contestants or set(args.contestants) - set(CONTESTANTS):
        parser.error("--contestants takes a subset of plain,batch,stream")
    # The Spark source sets fetch.queue.backoff.ms=10 on its consumers; the baseline gets it too.
    kafka_options = {"fetch.queue.backoff.ms": "10"}
    for item in args.kafka:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--kafka takes KEY=VALUE, got {item!r}")
        kafka_options[key.removeprefix("kafka.")] = value
    args.kafka = kafka_options
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile is not None:
        if "batch" not in args.contestants:
            raise BenchError("--profile needs the batch contestant")
        find_py_spy()
    run_started = time.monotonic()
    topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
    warmup_topic = f"{topic}-warmup"
    runs: dict[str, list[Run]] = {CONTESTANTS[name]: [] for name in args.contestants}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-spark-") as tmp_name, contextlib.ExitStack() as stack:
        tmp = Path(tmp_name)
        with console.status("starting the broker"):
            target = stack.enter_context(contextlib.closing(TidemarkTarget(tmp)))
        console.print(f"tidemark: {target.bootstrap}")
        for name, count in ((topic, args.records), (warmup_topic, WARMUP_RECORDS)):
            got = target.create_topic(name, args.partitions, args.timeout)
            if got != args.partitions:
                raise BenchError(f"{name} has {got} partitions, wanted {args.partitions}")
            produce(target.bootstrap, name, args.partitions, count, args.timeout, f"producing {name}")
        ends = end_offsets(target.bootstrap, topic, args.partitions, args.records, args.timeout)
        end_offsets(target.bootstrap, warmup_topic, args.partitions, WARMUP_RECORDS, args.timeout)
        console.print(f"{topic}: {args.records:,} records x {VALUE_SIZE} B values in {args.partitions} partitions, "
                      f"end offsets {[ends[p] for p in sorted(ends)]}")

        expected_bytes = args.records * VALUE_SIZE
        spark = None
        if {"batch", "stream"} & set(args.contestants):
            with console.status("starting Spark (local[2]) and warming up"):
                spark = stack.enter_context(contextlib.closing(SparkBench(target.bootstrap, args.kafka, tmp)))
                warm, warm_bytes = spark.batch(warmup_topic)
                if "stream" in args.contestants:
                    spark.stream(warmup_topic, args.timeout)
            console.print(f"Spark {spark.spark.version} ready (format registered with {spark.registered_with}); "
                          f"warm-up batch read of {warm.records:,} records took {warm.seconds:.2f} s (not counted)"
                          + (f"; consumer settings {args.kafka}" if args.kafka else ""))
            if warm.records != WARMUP_RECORDS or warm_bytes != WARMUP_RECORDS * VALUE_SIZE:
                raise BenchError(f"warm-up read {warm.records} records / {warm_bytes} bytes")

        for attempt in range(args.repeat):
            for name in args.contestants:
                label = CONTESTANTS[name]
                with console.status(f"{label}, run {attempt + 1}/{args.repeat}"):
                    if name == "plain":
                        run, value_bytes = plain_loop(target.bootstrap, topic, ends, args.kafka, args.timeout)
                    elif name == "batch":
                        assert spark is not None
                        run, value_bytes = spark.batch(topic)
                    else:
                        assert spark is not None
                        run, value_bytes = spark.stream(topic, args.timeout), expected_bytes
                if run.records != args.records or value_bytes != expected_bytes:
                    raise BenchError(f"{label}: read {run.records:,} records / {value_bytes:,} value bytes, "
                                     f"the topic holds {args.records:,} / {expected_bytes:,}")
                runs[label].append(run)
                console.print(f"  {label:16} run {attempt + 1}/{args.repeat}: {run.records:,} records in "
                              f"{run.seconds:6.2f} s = {run.per_s:>10,.0f} records/s "
                              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
                if name == "stream":
                    assert spark is not None
                    console.print(f"    {len(spark.last_durations)} micro-batch(es), durationMs "
                                  + "; ".join(", ".join(f"{k} {v}" for k, v in sorted(d.items()))
                                              for d in spark.last_durations))

        best = {name: min(rs, key=lambda r: r.seconds) for name, rs in runs.items()}
        options = f", consumer settings {args.kafka}" if args.kafka else ", librdkafka defaults"
        title = (f"Spark source vs plain confluent-kafka loop: {args.records:,} records x {VALUE_SIZE} B, "
                 f"{args.partitions} partitions, local[2], best of {args.repeat}, after a warm-up read{options}, "
                 f"{time.monotonic() - run_started:.0f} s total")
        out.print(results_table(best, runs, title))

        if args.compare_sources:
            if spark is None:
                raise BenchError("--compare-sources needs a Spark contestant")
            out.print(compare_sources(spark, warmup_topic, args.repeat, args.timeout))

        if args.profile is not None:
            assert spark is not None
            output = args.profile / "spark-batch.txt"
            profiler = Profiler(args.profile, os.getpid(), subprocesses=True)
            with console.status(f"profiling one Spark batch read into {output}"), profiler.record("spark-batch"):
                profiled, _ = spark.batch(topic)
            console.print(f"profiled Spark batch read: {profiled.seconds:.2f} s under py-spy (not a number to quote)")
            if "stream" in args.contestants:
                # The fixed cost per query: --repeat availableNow queries of the small warm-up topic.
                with console.status("profiling streaming queries"), profiler.record("spark-stream"):
                    for _ in range(args.repeat):
                        spark.stream(warmup_topic, args.timeout)

    if args.profile is not None:
        for name in ("spark-batch", "spark-stream"):
            if (args.profile / f"{name}.txt").exists():
                out.print(f"[bold]{name}")
                for table in summarize_profile(args.profile / f"{name}.txt"):
                    out.print(table)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (BenchError, KafkaException) as error:
        console.print(f"[red]benchmark failed: {error}")
        sys.exit(1)
