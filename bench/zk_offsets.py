"""Offset commits: offsets.storage=kafka (the offsets topic) against offsets.storage=zookeeper.

    python -m bench.zk_offsets [--seconds S] [--partitions N]

One ZooKeeper server (Debian's zookeeper 3.8 jar, standalone, forceSync=yes: each transaction
fsync'd, its default) and two tidemark brokers of this build on 127.0.0.1: one with the default
offsets.storage=kafka (commits appended to __consumer_offsets and fsync'd before the answer),
one with offsets.storage=zookeeper (each commit one ZooKeeper multi). The same client drives
both: one confluent-kafka Consumer (assign() only) committing synchronously in a loop for
--seconds per case, each commit the next offset of every partition it covers:

  single:  one partition per commit
  batch:   --partitions partitions (default 100) per commit

For context, "zookeeper, 1 write/partition" is what Kafka 0.8's ZooKeeper offset storage did per
commit (one synchronous znode write per partition, in turn), measured with kazoo straight
against the same ZooKeeper (no broker in between).

Reported: commits/s, partition offsets/s, p50/p99 commit latency, and the log's throughput over
ZooKeeper's. Afterwards every last committed offset is read back (committed()) from both brokers
and, for ZooKeeper, from the znodes. Goal (issue): the log at least 50x ZooKeeper on the batch
commits. Every loop is bounded in time and count.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from kazoo.client import KazooClient
from rich.table import Table

from bench.offsets import Latencies
from bench.produce_fetch import BenchError, BrokerProcess, console, out
from tests.integration.clients import create_topic
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available

SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "50"}
TOPIC = "zk-bench"
MAX_COMMITS = 1_000_000
WARMUP_COMMITS = 20
GOAL = 50.0
SEQUENTIAL = "zookeeper, 1 write/partition"


def run_case(bootstrap: str, group: str, partitions: list[int], seconds: float) -> tuple[Latencies, int]:
    """Synchronous commits of `partitions` for `seconds`; returns latencies and the last offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 3})
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in partitions])
        offset = 0
        for _ in range(WARMUP_COMMITS):  # the offsets topic / znode paths come into being here
            offset += 1
            consumer.commit(offsets=[TopicPartition(TOPIC, p, offset) for p in partitions], asynchronous=False)
        result = Latencies()
        started = time.perf_counter()
        deadline = started + seconds
        while result.operations < MAX_COMMITS:
            offset += 1
            wanted = [TopicPartition(TOPIC, p, offset) for p in partitions]
            sent = time.perf_counter()
            answered = consumer.commit(offsets=wanted, asynchronous=False)
            now = time.perf_counter()
            failed = [tp for tp in answered if tp.error is not None]
            if failed:
                raise BenchError(f"commit failed: {failed[0].error}")
            result.seconds.append(now - sent)
            result.operations += 1
            result.items += len(partitions)
            if now >= deadline:
                break
        result.elapsed = time.perf_counter() - started
        committed = consumer.committed([TopicPartition(TOPIC, p) for p in partitions], timeout=30)
        wrong = [tp for tp in committed if tp.offset != offset]
        if wrong:
            raise BenchError(f"{group}: read back {wrong[0].offset} for partition {wrong[0].partition}, committed {offset}")
        return result, offset
    finally:
        consumer.close()


def run_sequential_writes(zookeeper: ZooKeeperServer, partitions: list[int], seconds: float) -> Latencies:
    """One synchronous znode write per partition per commit, in turn (Kafka 0.8's way)."""
    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=30)
    try:
        paths = [f"/consumers/bench-sequential/offsets/{TOPIC}/{p}" for p in partitions]
        for path in paths:
            client.ensure_path(path)
        result = Latencies()
        started = time.perf_counter()
        deadline = started + seconds
        offset = 0
        while result.operations < MAX_COMMITS:
            offset += 1
            data = str(offset).encode()
            sent = time.perf_counter()
            for path in paths:
                client.set(path, data)
            now = time.perf_counter()
            result.seconds.append(now - sent)
            result.operations += 1
            result.items += len(paths)
            if now >= deadline:
                break
        result.elapsed = time.perf_counter() - started
        return result
    finally:
        client.stop()
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="per case and storage (default 10)")
    parser.add_argument("--partitions", type=int, default=100, help="partitions per batch commit (default 100)")
    args = parser.parse_args(argv)
    if not zookeeper_available():
        console.print("ZooKeeper is not installed (make system-deps installs zookeeperd)")
        return 2
    cases = {"single": [0], "batch": list(range(args.partitions))}
    with tempfile.TemporaryDirectory(prefix="zk-bench-") as tmp_name:
        tmp = Path(tmp_name)
        zookeeper = ZooKeeperServer(tmp / "zookeeper", force_sync=True)
        brokers: dict[str, BrokerProcess] = {}
        try:
            zookeeper.start()
            brokers["kafka"] = BrokerProcess(tmp / "kafka-data", SETTINGS).start()
            brokers["zookeeper"] = BrokerProcess(tmp / "zk-data", {
                **SETTINGS, "offsets.storage": "zookeeper", "zookeeper.connect": zookeeper.connect,
                "offsets.topic.replication.factor": "1"}).start()
            for broker in brokers.values():
                create_topic(broker.bootstrap, TOPIC, args.partitions)
            results: dict[tuple[str, str], Latencies] = {}
            last: dict[tuple[str, str], int] = {}
            for case, partitions in cases.items():
                for storage, broker in brokers.items():
                    console.print(f"[bold]{case}[/bold] commits ({len(partitions)} partitions) "
                                  f"with offsets.storage={storage} ...")
                    results[case, storage], last[case, storage] = run_case(
                        broker.bootstrap, f"bench-{case}", partitions, args.seconds)
                console.print(f"[bold]{case}[/bold] as Kafka 0.8 wrote them: one znode write per partition ...")
                results[case, SEQUENTIAL] = run_sequential_writes(zookeeper, partitions, args.seconds)
            check_znodes(zookeeper, cases, last)
        finally:
            for broker in brokers.values():
                broker.kill()
            zookeeper.stop()
    out.print(results_table(results, cases))
    ratio = results["batch", "kafka"].ops_per_s / results["batch", "zookeeper"].ops_per_s
    verdict = "met" if ratio >= GOAL else "NOT met"
    out.print(f"Goal: the log at least {GOAL:g}x ZooKeeper on {args.partitions}-partition commits: "
              f"{ratio:.1f}x, {verdict}.")
    return 0


def check_znodes(zookeeper: ZooKeeperServer, cases: dict[str, list[int]], last: dict[tuple[str, str], int]) -> None:
    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=30)
    try:
        for case, partitions in cases.items():
            expected = str(last[case, "zookeeper"]).encode()
            for p in partitions:
                data, _ = client.get(f"/consumers/bench-{case}/offsets/{TOPIC}/{p}")
                if data != expected:
                    raise BenchError(f"znode of {case} partition {p} holds {data!r}, committed {expected!r}")
    finally:
        client.stop()
        client.close()


def results_table(results: dict[tuple[str, str], Latencies], cases: dict[str, list[int]]) -> Table:
    table = Table(title="Synchronous offset commits, one confluent-kafka consumer")
    for header in ("case", "offsets.storage", "commits/s", "partition offsets/s", "p50 ms", "p99 ms", "kafka/zookeeper"):
        table.add_column(header, justify="left" if header in ("case", "offsets.storage") else "right")
    for case, partitions in cases.items():
        ratio = results[case, "kafka"].ops_per_s / results[case, "zookeeper"].ops_per_s
        sequential = results[case, "kafka"].ops_per_s / results[case, SEQUENTIAL].ops_per_s
        for storage in ("kafka", "zookeeper", SEQUENTIAL):
            r = results[case, storage]
            shown = {"kafka": f"{ratio:.1f}x", SEQUENTIAL: f"(log: {sequential:.1f}x)"}.get(storage, "")
            table.add_row(f"{case} ({len(partitions)} p)", storage, f"{r.ops_per_s:,.0f}", f"{r.items_per_s:,.0f}",
                          f"{r.p(0.50):.2f}", f"{r.p(0.99):.2f}", shown)
    return table


if __name__ == "__main__":
    sys.exit(main())
