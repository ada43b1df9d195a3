"""In process: a leader's CPU for the two followers' reads of each appended batch, each follower
reading the log against the second one sharing the first's bytes (`apis/fetch.py`'s
`_follower_read`).

    python -m bench.follower_read_share [--appends N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from tidemark.broker.apis import fetch
from tidemark.log import LogConfig, UnifiedLog
from tidemark.records import build_batch
from tidemark.replication.partition import Partition


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.follower_read_share")
    parser.add_argument("--appends", type=int, default=20_000, help="single-record appends (default 20,000)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        log = UnifiedLog.open(Path(tmp) / "t-0", LogConfig(), clean_shutdown=True)
        partition = Partition("t", 0, log)
        try:
            for width in (1, 100):
                batch = [(b"k%d" % i, b"v" * 30, (), 1) for i in range(width)]
                appends = max(1, args.appends // width)
                plain = shared = 0.0
                for _ in range(appends):
                    log.append(build_batch(batch), now_ms=1)
                    end = log.log_end_offset
                    offset = end - width
                    started = time.process_time()
                    first = log.read(offset, 1 << 20, upper_bound=end, min_one_batch=True)
                    second = log.read(offset, 1 << 20, upper_bound=end, min_one_batch=True)
                    read = time.process_time()
                    one = fetch._follower_read(partition, offset, 1 << 20, end, True)
                    other = fetch._follower_read(partition, offset, 1 << 20, end, True)
                    plain += read - started
                    shared += time.process_time() - read
                    assert first == second == one == other
                print(f"batch of {width} record(s), {appends:,} appends: two reads {plain / appends * 1e6:.1f} us, "
                      f"shared {shared / appends * 1e6:.1f} us per append")
        finally:
            log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
