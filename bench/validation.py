"""The produce validator's cost per record: `validate_produce` on one batch, in-process.

    python -m bench.validation [--records N] [--repeat R]

The broker runs `validate_produce` on its event loop for every partition of every Produce, so
its time per record bounds the loop's produce rate. One batch of --records records (16-byte
keys, 100-byte values, one header, as a producer writes them), uncompressed and zstd; each case
timed --repeat times (each timing long enough to run for ~0.2 s), the fastest shown in CPU
microseconds (this process's, so other work on the machine counts little) per record. The zstd case includes
decompressing the batch.
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit

from tidemark.broker.validator import validate_produce
from tidemark.log.config import LogConfig
from tidemark.records import CompressionType, build_batch


def batch(records: int, codec: CompressionType) -> bytes:
    return build_batch([(b"key-%012d" % i, b"v" * 100, [("trace", b"0123456789")], 1_000_000 + i)
                        for i in range(records)], compression=codec)


def per_record_us(data: bytes, config: LogConfig, records: int, repeat: int) -> float:
    def run() -> None:
        validate_produce(data, config, topic="t", partition=0, internal=False)

    timer = timeit.Timer(run, timer=time.process_time)  # CPU time: other processes' load does not count
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number / records * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        data = batch(args.records, codec)
        for name, config in (("delete", LogConfig()), ("compact", LogConfig(cleanup_policy="compact"))):
            us = per_record_us(data, config, args.records, args.repeat)
            print(f"{codec.name.lower():5} {name:8} {args.records} records: {us:.3f} us/record")
    return 0


if __name__ == "__main__":
    sys.exit(main())
