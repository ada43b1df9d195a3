"""Run one ZookeeperConsumer, printing what happens as JSON lines on stdout (bounded).

    python -m tidemark.consumer --zookeeper HOST:PORT --bootstrap-server HOST:PORT --group G
        --topic T [--topic T2]... [--config NAME=VALUE]... [--max-records N] [--max-runtime-s S]

--config takes the consumer's settings by Kafka's names (offsets.storage=zookeeper|kafka,
dual.commit.enabled=true|false, auto.commit.interval.ms, auto.offset.reset=smallest|largest,
zookeeper.session.timeout.ms, rebalance.max.retries, ...). Each line is an event
(registered, assigned, committed, closed) or a record {"event": "record", "topic",
"partition", "offset", "value"}. SIGTERM or SIGINT stops it cleanly: it commits, releases its
partitions and deregisters.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from tidemark.consumer.consumer import ZookeeperConsumer


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tidemark.consumer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--zookeeper", required=True, help="zookeeper.connect")
    parser.add_argument("--bootstrap-server", required=True, help="where records are fetched (and Kafka-stored offsets)")
    parser.add_argument("--group", required=True, help="group.id")
    parser.add_argument("--topic", action="append", required=True, help="a topic to consume (one stream); repeatable")
    parser.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", help="a consumer setting")
    parser.add_argument("--max-records", type=int, default=None, help="stop after this many records")
    parser.add_argument("--max-runtime-s", type=float, default=600.0, help="stop after this long (default 600)")
    args = parser.parse_args(argv)
    config = {"zookeeper.connect": args.zookeeper, "bootstrap.servers": args.bootstrap_server, "group.id": args.group}
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--config wants NAME=VALUE, got {item!r}")
        config[name.strip()] = value.strip()

    stopping = False

    def stop(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    consumer = ZookeeperConsumer(config, {topic: 1 for topic in args.topic}, on_event=_emit).start()
    deadline = time.monotonic() + args.max_runtime_s
    count = 0
    try:
        while not stopping and time.monotonic() < deadline and (args.max_records is None or count < args.max_records):
            for msg in consumer.poll(0.2):
                value = msg.value()
                _emit({"event": "record", "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
                       "value": None if value is None else value.decode(errors="replace")})
                count += 1
    finally:
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
