"""Offline decode rate of the "tidemark-offsets" Spark source, next to plain Python loops.

    python -m bench.offsets_log_spark [--records N] [--partitions P] [--master local[2]] [--runs R]

Writes a data directory of N offset commit records (v1 keys, v3 values, batches of 1,000 as the
broker's record builders make them) spread over P `__consumer_offsets-N` partitions, then reads
the same files three ways in one run:

  (1) Spark: spark.read.format("tidemark-offsets").load(dir).count() on --master, one task per
      offsets partition (best of --runs; the Arrow batches all cross into the JVM);
  (2) `tidemark offsets dump`'s decoder: one process, every record to its dump line;
  (3) the source's own row builder in one process, no Spark: the same decoding as (1) per core.

Reports records/s for each and the ratios (1)/(2) and (1)/(3).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from rich.table import Table

from bench.produce_fetch import console, out
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)

BATCH = 1_000
GROUPS_PER_PARTITION = 50
TOPIC_PARTITIONS = 100
T = 1_700_000_000_000


def write_partition(directory: Path, partition: int, records: int) -> int:
    """One offsets partition's segment: `records` commits of 50 groups x 100 partitions."""
    directory.mkdir(parents=True, exist_ok=True)
    keys = [encode_key(OffsetCommitKey(f"group-{partition}-{g}", "orders", p))
            for g in range(GROUPS_PER_PARTITION) for p in range(TOPIC_PARTITIONS)]
    size = 0
    with open(directory / "00000000000000000000.log", "wb") as segment:
        for base in range(0, records, BATCH):
            batch = build_batch([(keys[i % len(keys)], encode_offset_commit_value(OffsetCommitValue(i, 7, "", T + i)),
                                  (), T + i) for i in range(base, min(records, base + BATCH))], base_offset=base)
            segment.write(batch)
            size += len(batch)
    return size


def write_data_dir(root: Path, records: int, partitions: int) -> int:
    per_partition = [records // partitions + (1 if i < records % partitions else 0) for i in range(partitions)]
    jobs = [(root / f"__consumer_offsets-{i}", i, n) for i, n in enumerate(per_partition)]
    with multiprocessing.get_context("fork").Pool(min(partitions, os.cpu_count() or 1)) as pool:
        return sum(pool.starmap(write_partition, jobs))


def spark_rate(root: Path, master: str, runs: int) -> tuple[int, list[float], float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from tidemark.spark import register

    started = time.perf_counter()
    spark = (SparkSession.builder.master(master).appName("bench offsets-log")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    startup = time.perf_counter() - started
    seconds = []
    count = 0
    try:
        for _ in range(runs):
            began = time.perf_counter()
            count = spark.read.format("tidemark-offsets").load(str(root)).count()
            seconds.append(time.perf_counter() - began)
    finally:
        spark.stop()
    return count, seconds, startup


def dump_rate(root: Path) -> tuple[int, float]:
    from tidemark.cli.offsets import dump_segment, partition_dirs
    from tidemark.log.direct_read import segment_files

    began = time.perf_counter()
    count = 0
    for number, directory in partition_dirs(root, None):
        for segment in segment_files(directory):
            for _line in dump_segment(number, segment.read_bytes()):
                count += 1
    return count, time.perf_counter() - began


def builder_rate(root: Path) -> tuple[int, float]:
    from tidemark.log.direct_read import iter_log_records, topic_partition_dirs
    from tidemark.spark.offsets_source import decode_records

    began = time.perf_counter()
    count = 0
    for number, directory in topic_partition_dirs(root, "__consumer_offsets"):
        for batch in decode_records(number, iter_log_records(directory)):
            count += batch.num_rows
    return count, time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=8, help="offsets partitions (Spark tasks)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=2, help="Spark reads; the best counts")
    parser.add_argument("--quick", action="store_true", help="100,000 records, one Spark run")
    args = parser.parse_args()
    if args.quick:
        args.records, args.runs = min(args.records, 100_000), 1
    run_started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-offsets-log-") as tmp:
        root = Path(tmp)
        with console.status(f"writing {args.records:,} offset commit records"):
            began = time.perf_counter()
            size = write_data_dir(root, args.records, args.partitions)
            write_s = time.perf_counter() - began
        console.print(f"  wrote {args.records:,} records, {size / 2**20:.1f} MiB in {write_s:.1f} s")
        with console.status(f"Spark on {args.master}: reading the offsets log"):
            spark_count, spark_seconds, startup = spark_rate(root, args.master, args.runs)
        console.print(f"  Spark read {spark_count:,} rows in {', '.join(f'{s:.2f}' for s in spark_seconds)} s")
        with console.status("tidemark offsets dump's decoder"):
            dump_count, dump_s = dump_rate(root)
        with console.status("the source's row builder, one process"):
            builder_count, builder_s = builder_rate(root)
    if not spark_count == dump_count == builder_count == args.records:
        console.print(f"[red]record counts differ: Spark {spark_count}, dump {dump_count}, builder {builder_count}")
        return 1
    best = min(spark_seconds)
    spark_rps = spark_count / best
    dump_rps = dump_count / dump_s
    builder_rps = builder_count / builder_s

    table = Table(title=f"offsets log decode, {args.records:,} offset commit records in {args.partitions} partitions "
                        f"({size / 2**20:.1f} MiB), {time.monotonic() - run_started:.0f} s total, "
                        f"{os.cpu_count()} CPUs, load average {load_before:.1f} at start, "
                        f"Python {platform.python_version()}", title_justify="left")
    table.add_column("reader")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row(f"(1) Spark source on {args.master}", "records/s (best run)", f"{spark_rps:,.0f}")
    table.add_row("", "seconds per run", ", ".join(f"{s:.2f}" for s in spark_seconds))
    table.add_row("", "session start seconds", f"{startup:.1f}")
    table.add_row("(2) offsets dump decoder, 1 process", "records/s", f"{dump_rps:,.0f}")
    table.add_row("(3) source row builder, 1 process", "records/s", f"{builder_rps:,.0f}")
    table.add_row("ratios", "(1) / (2)", f"{spark_rps / dump_rps:.2f}x", end_section=False)
    table.add_row("", "(1) / (3)", f"{spark_rps / builder_rps:.2f}x")
    out.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
