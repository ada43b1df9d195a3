"""Run the replication simulation from the command line.

    python -m tests.simulation.run --seed 1234 --trace      # replay one seed, every step printed
    python -m tests.simulation.run --seeds 0-2000           # a range; prints each failing seed
    python -m tests.simulation.run --seeds 0-500 --truncation legacy   # the pre-issue-23 fetcher rule
    python -m tests.simulation.run --seeds 0-300 --transactions        # transactional producers and markers
"""

from __future__ import annotations

import argparse
import sys
import time

from .cluster import Settings, quiet_logs, simulate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation.run")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--seeds", default="0-100", help="FIRST-END (end excluded)")
    parser.add_argument("--trace", action="store_true", help="print every step of a single seed")
    kafka = Settings()  # by default the rules the code follows (Kafka's)
    parser.add_argument("--truncation", choices=["kafka", "legacy"], default=kafka.truncation)
    parser.add_argument("--restart-high-watermark", choices=["log_end", "checkpoint"],
                        default=kafka.restart_high_watermark)
    parser.add_argument("--follower-position-before-read", action="store_true",
                        help="record a follower's fetch position before its read (before issue 23)")
    parser.add_argument("--transactions", action="store_true",
                        help="transactional producers and their coordinator's markers (issue 25)")
    parser.add_argument("--stop-at-first", action="store_true")
    args = parser.parse_args(argv)
    settings = Settings(truncation=args.truncation, restart_high_watermark=args.restart_high_watermark,
                        follower_position_after_read=not args.follower_position_before_read,
                        transactions=args.transactions)
    if args.seed is not None:
        seeds = range(args.seed, args.seed + 1)
    else:
        first, end = (int(x) for x in args.seeds.split("-"))
        seeds = range(first, end)
    quiet_logs()
    failed = 0
    started = time.perf_counter()
    for seed in seeds:
        sim = simulate(seed, settings, trace=args.trace)
        if args.trace:
            print(sim.format_trace())
            print(sim.describe())
            print(dict(sim.stats))
        for exc in sim.findings:
            print(str(exc) if args.trace or len(seeds) == 1 else " | ".join(str(exc).split("\n")[:2]), flush=True)
        if sim.findings:
            failed += 1
            if args.stop_at_first:
                break
    elapsed = time.perf_counter() - started
    print(f"{len(seeds)} seeds, {failed} failed, {elapsed:.1f} s ({len(seeds) / elapsed:.1f} seeds/s)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
