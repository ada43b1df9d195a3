"""The "tidemark" Spark source on a standalone cluster against local[2] and a plain confluent-kafka
loop: what the extra processes (a master, two workers, two executors) cost on this machine.

    python -m bench.spark_cluster [--records N] [--partitions P] [--repeat R]

Setup (not timed): a tidemark broker (free loopback port, temporary data dir), one topic of
--partitions partitions holding --records 100-byte records (bench.spark_source's producer), and a
standalone cluster from the pyspark package (tests/spark/standalone.py: a master and two workers
of 1 core each on loopback).

Contestants, each reading the whole topic from offset 0 --repeat times, the median reported:
  plain     bench.spark_source's single confluent-kafka consumer loop;
  local[2]  spark-submit --master local[2] of this file's driver: one warm-up batch read, then
            timed batch reads (count and sum of value lengths, checked against the plain loop's);
            then one warm-up and timed streaming queries (startingOffsets=earliest,
            trigger(availableNow=True) into "noop", a fresh checkpoint each, timed from start() to
            the end of awaitTermination(); their numInputRows must sum to --records);
  cluster   the same driver, spark-submit --master spark://... (executors in their own JVMs).
The driver also reports how long spark-submit took to hand it a session ("session start"), and
each streaming query's micro-batch count and the durationMs of its batches (Spark's own split).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_RECORDS = 300_000
DEFAULT_PARTITIONS = 4
DEFAULT_REPEAT = 3
TIMEOUT_S = 900.0
TOPIC = "bench-cluster"


def driver(bootstrap: str, topic: str, repeat: int, result: str, launched_at: float) -> None:
    """Runs under spark-submit: timed batch reads of the topic, written as JSON to `result`."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tidemark.spark import register

    spark = SparkSession.builder.appName("tidemark-bench-spark-cluster").getOrCreate()
    session_start = time.time() - launched_at
    register(spark)

    def read() -> tuple[float, int, int]:
        started = time.perf_counter()
        row = (spark.read.format("tidemark").option("bootstrap.servers", bootstrap).option("subscribe", topic)
               .load().agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0])
        return time.perf_counter() - started, row["n"], row["b"]

    def stream() -> tuple[float, int, int, list[dict]]:
        checkpoint = tempfile.mkdtemp(prefix="checkpoint-", dir=Path(result).parent)
        frame = (spark.readStream.format("tidemark").option("bootstrap.servers", bootstrap)
                 .option("subscribe", topic).option("startingOffsets", "earliest").load())
        started = time.perf_counter()
        query = (frame.writeStream.format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", checkpoint).start())
        try:
            if not query.awaitTermination(TIMEOUT_S):
                raise RuntimeError(f"streaming query not done after {TIMEOUT_S} s")
            elapsed = time.perf_counter() - started
            batches = [p for p in query.recentProgress if p["numInputRows"]]
            records = sum(p["numInputRows"] for p in query.recentProgress)
        finally:
            query.stop()
        # Every record's value is the bench's 100 bytes: the byte check is the batch reads'.
        return elapsed, records, len(batches), [p["durationMs"] for p in batches]

    read()  # warm-up: executors' and Python workers' start, first planning
    runs = [read() for _ in range(repeat)]
    stream()  # warm-up of the streaming path (its first planning and code generation)
    stream_runs = [stream() for _ in range(repeat)]
    Path(result).write_text(json.dumps({"session_start": session_start, "runs": runs, "stream_runs": stream_runs,
                                        "master": spark.sparkContext.master}))
    spark.stop()


def submit(cluster, master: str, bootstrap: str, repeat: int, tmp: Path) -> dict:
    """The driver below under spark-submit --master `master`; its JSON result."""
    from bench.produce_fetch import BenchError

    result = tmp / f"result-{len(list(tmp.glob('result-*')))}.json"
    completed = cluster.submit(str(Path(__file__).resolve()), "--driver", bootstrap, TOPIC, str(repeat), str(result),
                               str(time.time()), master=master)
    if completed.returncode != 0:
        raise BenchError(f"spark-submit --master {master} failed:\n{completed.stderr[-3000:]}")
    return json.loads(result.read_text())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--repeat", type=int, default=DEFAULT_REPEAT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # Imported here: under spark-submit this file runs as the driver, without the repo on its path.
    from rich.table import Table

    from bench.produce_fetch import BenchError, TidemarkTarget, console, out
    from bench.spark_source import end_offsets, plain_loop, produce
    from tests.spark.standalone import StandaloneCluster

    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-spark-cluster-") as name, contextlib.ExitStack() as stack:
        tmp = Path(name)
        target = stack.enter_context(contextlib.closing(TidemarkTarget(tmp)))
        target.create_topic(TOPIC, args.partitions, 30)
        produce(target.bootstrap, TOPIC, args.partitions, args.records, TIMEOUT_S, f"producing {args.records:,}")
        ends = end_offsets(target.bootstrap, TOPIC, args.partitions, args.records, 60)
        plain = [plain_loop(target.bootstrap, TOPIC, ends, {"fetch.queue.backoff.ms": "10"}, TIMEOUT_S)
                 for _ in range(args.repeat)]
        value_bytes = plain[0][1]
        console.print("starting the standalone cluster (a master, two workers)")
        cluster = StandaloneCluster(tmp / "cluster").start()
        stack.callback(cluster.stop)
        results = {}
        for label, master in (("local[2]", "local[2]"), ("standalone cluster", cluster.url)):
            console.print(f"spark-submit --master {master}")
            results[label] = submit(cluster, master, target.bootstrap, args.repeat, tmp)
            for seconds, records, length in results[label]["runs"]:
                if records != args.records or length != value_bytes:
                    raise BenchError(f"{label}: read {records} records, {length} value bytes; expected "
                                     f"{args.records}, {value_bytes}")
            for seconds, records, batches, durations in results[label]["stream_runs"]:
                if records != args.records:
                    raise BenchError(f"{label} streaming: read {records} records; expected {args.records}")
                console.print(f"  {label} streaming: {seconds:.2f} s, {batches} micro-batch(es), durationMs "
                              + "; ".join(json.dumps(d, sort_keys=True) for d in durations))
        plain_s = statistics.median(run.seconds for run, _ in plain)
        rows = [("plain confluent-kafka loop", plain_s, None, None, [run.seconds for run, _ in plain])]
        for kind, key in (("batch", "runs"), ("streaming availableNow", "stream_runs")):
            local_s = statistics.median(r[0] for r in results["local[2]"][key])
            rows += [(f"{label}, {kind}", statistics.median(r[0] for r in result[key]), local_s,
                      result["session_start"], [r[0] for r in result[key]]) for label, result in results.items()]
        table = Table(title=f"{args.records:,} records, {args.partitions} partitions, median of {args.repeat} runs, "
                            f"load average {os.getloadavg()[0]:.1f} at the end",
                      title_justify="left")
        for column in ("reader", "median s", "records/s", "vs plain", "vs local[2]", "session start s", "runs s"):
            table.add_column(column, justify="left" if column == "reader" else "right")
        for label, seconds, local_s, start, runs in rows:
            table.add_row(label, f"{seconds:.2f}", f"{args.records / seconds:,.0f}", f"{plain_s / seconds:.2f}x",
                          "-" if local_s is None else f"{local_s / seconds:.2f}x",
                          "-" if start is None else f"{start:.1f}", ", ".join(f"{s:.2f}" for s in runs))
        out.print(table)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--driver"]:
        bootstrap, topic, repeat, result, launched_at = sys.argv[2:7]
        driver(bootstrap, topic, int(repeat), result, float(launched_at))
    else:
        sys.exit(main())
