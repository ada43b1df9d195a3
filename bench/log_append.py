"""The broker's CPU per log append of one coordinator batch, in process.

    python -m bench.log_append [--appends N] [--repeats R] [--profile]

Builds an offsets batch of 1 and of 100 records (records.build_key_value_batch, as the
coordinator's writer does) and appends it --appends times to a fresh log in a temporary
directory (UnifiedLog.append: checks, offsets, the file write, the index); prints the median
over --repeats of this thread's CPU microseconds per append (not wall clock: the machine is
shared). No fsync: the flusher does that off the event loop. On a tree whose append takes an
`origin`, the coordinator's appends say origin COORDINATOR, and a client's produce of the
same batch (origin CLIENT, every check) is timed beside it.
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from tidemark.log.config import LogConfig
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import build_key_value_batch

try:
    from tidemark.log.unified_log import AppendOrigin
except ImportError:  # a tree from before origins: every append is checked as a client's
    AppendOrigin = None

NOW = 1_700_000_000_000


def batch_of(records: int) -> bytes:
    pairs = [(b"\x00\x01\x00\x05group\x00\x05topic" + i.to_bytes(4, "big"), b"v" * 40) for i in range(records)]
    return build_key_value_batch(pairs, NOW)


def run(records: int, appends: int, origin: str | None) -> float:
    """CPU us per append of one batch of `records` records."""
    directory = Path(tempfile.mkdtemp(prefix="bench-append-"))
    try:
        log = UnifiedLog.open(directory / "__consumer_offsets-0", LogConfig(), now_ms=NOW)
        batch = batch_of(records)
        kwargs = {} if origin is None else {"origin": getattr(AppendOrigin, origin)}
        append = log.append
        start = time.thread_time_ns()
        for _ in range(appends):
            append(batch, leader_epoch=0, now_ms=NOW, **kwargs)
        elapsed = time.thread_time_ns() - start
        log.close()
        return elapsed / appends / 1000
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one 1-record run")
    args = parser.parse_args()
    has_origin = AppendOrigin is not None and "origin" in inspect.signature(UnifiedLog.append).parameters
    origins = ["COORDINATOR", "CLIENT"] if has_origin else [None]
    if args.profile:
        profile = cProfile.Profile()
        profile.runcall(run, 1, args.appends, origins[0])
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
        return
    for records in (1, 100):
        samples: dict[str | None, list[float]] = {origin: [] for origin in origins}
        for _ in range(args.repeats):  # the origins alternate within a repeat: same load for both
            for origin in origins:
                samples[origin].append(run(records, args.appends // (10 if records > 1 else 1), origin))
        for origin in origins:
            label = origin or "(no origin)"
            print(f"{records:>4} records  {label:<12} {statistics.median(samples[origin]):8.2f} us/append"
                  f"  (samples {', '.join(f'{s:.2f}' for s in samples[origin])})")
        if len(origins) == 2:
            ratios = [c / k for c, k in zip(samples["COORDINATOR"], samples["CLIENT"])]
            print(f"{records:>4} records  COORDINATOR/CLIENT median ratio {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
