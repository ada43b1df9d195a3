"""Broker restart cost: how long loading a data directory takes after a clean shutdown and after
a crash, and how many bytes it reads.

    python -m bench.restart [--gib 1] [--partitions 20] [--runs 3]

Builds a data directory of --gib GiB over --partitions partition logs (batches of 100 records
of 160 bytes, log.segment.bytes=16 MiB) with tidemark.log.LogManager in this process, closes it
cleanly (checkpoints, clean-shutdown marker), then times LogManager.open() --runs times for:
  clean    the marker present: a clean restart.
  unclean  the marker removed (a SIGKILL after the last checkpoint): every segment below the
           checkpointed recovery point is flushed, the active segments are re-validated.
Bytes read are the process's read syscall bytes (/proc/self/io rchar) during open(): page-cache
hits count too, so it is the work done, whatever the cache holds. Timings are with a warm page
cache (the data was just written). Medians are printed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tidemark.log import LogConfig, LogManager
from tidemark.records import build_batch

RECORDS_PER_BATCH = 100
VALUE = b"v" * 160
NOW = 1_700_000_000_000


def read_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def build(data_dir: Path, gib: float, partitions: int, config: LogConfig) -> int:
    manager = LogManager(data_dir, config)
    manager.open()
    batch = build_batch([(b"key-%d" % i, VALUE, (), NOW + i) for i in range(RECORDS_PER_BATCH)])
    per_partition = int(gib * (1 << 30)) // partitions // len(batch)
    for p in range(partitions):
        log = manager.get_or_create("restart", p)
        for i in range(per_partition):
            log.append(batch, now_ms=NOW + i)
        log.flush()
    manager.close()
    return per_partition * len(batch) * partitions


def time_open(data_dir: Path, config: LogConfig, *, clean: bool) -> tuple[float, int]:
    marker = data_dir / ".kafka_cleanshutdown"
    if clean:
        marker.touch()
    else:
        marker.unlink(missing_ok=True)
    manager = LogManager(data_dir, config)
    before = read_bytes()
    started = time.perf_counter()
    manager.open()
    seconds = time.perf_counter() - started
    read = read_bytes() - before
    manager.close()  # leaves the marker: the next run decides again
    return seconds, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    config = LogConfig(segment_bytes=16 << 20)
    console = Console()
    with tempfile.TemporaryDirectory(prefix="tidemark-restart-") as tmp:
        data_dir = Path(tmp)
        started = time.perf_counter()
        size = build(data_dir, args.gib, args.partitions, config)
        console.print(f"built {size / (1 << 30):.2f} GiB in {args.partitions} partitions "
                      f"({len(list(data_dir.glob('*/*.log')))} segments) in {time.perf_counter() - started:.1f} s")
        table = Table(title=f"restart of {size / (1 << 30):.2f} GiB, median of {args.runs}")
        for column in ("restart", "seconds (median)", "runs", "MiB read (median)", "share of data read"):
            table.add_column(column, justify="right")
        for clean in (True, False):
            runs = [time_open(data_dir, config, clean=clean) for _ in range(args.runs)]
            seconds = statistics.median(s for s, _ in runs)
            read = statistics.median(r for _, r in runs)
            table.add_row("clean" if clean else "unclean", f"{seconds:.3f}",
                          " ".join(f"{s:.3f}" for s, _ in runs), f"{read / (1 << 20):.1f}", f"{read / size:.2%}")
        console.print(table)


if __name__ == "__main__":
    main()
