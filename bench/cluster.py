"""Replication's cost and failover time: three brokers on ZooKeeper against one broker.

    python -m bench.cluster [--records 20000] [--repeats 3]

Cases, side by side in one run (same client, same records, all on 127.0.0.1):
  (a) produce with acks=all: an idempotent confluent-kafka producer writes --records 100-byte
      records to a 1-partition topic with RF=3 on three brokers (min.insync.replicas=2), and to
      a 1-partition topic on one embedded broker (RF=1); records/s, median of --repeats.
  (b) failover: SIGKILL the partition's leader; time from the kill to the next acknowledged
      produce (zookeeper.session.timeout.ms=6000 here: Kafka's floor is the session timeout).
  (c) controlled shutdown: SIGTERM the leader; time from the signal to the next acknowledged
      produce.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.table import Table

from bench.produce_fetch import console, out

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available  # noqa: E402

SESSION_TIMEOUT_MS = 6000
VALUE = b"x" * 100


def _produce(bootstrap: str, topic: str, records: int) -> float:
    """Records/s of an idempotent acks=all producer writing `records` records."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    failures = []
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0, on_delivery=lambda e, _m: e and failures.append(e))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) != 0 or failures:
        raise RuntimeError(f"produce failed: {failures[:1]}")
    return records / (time.perf_counter() - started)


def _create(bootstrap: str, topic: str, replication: int, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, 1, replication, config=configs)])[topic].result(60)


def _leader(bootstrap: str, topic: str) -> int:
    return AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def _until_acknowledged(bootstrap: str, topic: str, deadline_s: float = 120) -> float:
    """Seconds until one acks=all produce is acknowledged (retrying through the leader change)."""
    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": int(deadline_s * 1000),
                         "retry.backoff.ms": 20, "topic.metadata.refresh.interval.ms": 100})
    delivered = []
    producer.produce(topic, VALUE, partition=0, on_delivery=lambda e, _m: delivered.append(e))
    producer.flush(deadline_s)
    if delivered != [None]:
        raise RuntimeError(f"no acknowledged produce after the failure: {delivered}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not zookeeper_available():
        raise SystemExit("ZooKeeper is not installed (make system-deps)")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        zookeeper = ZooKeeperServer(tmp / "zookeeper", force_sync=True).start()
        settings = {"zookeeper.connect": zookeeper.connect, "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                    "replica.fetch.wait.max.ms": "100", "offsets.topic.replication.factor": "3"}
        cluster = {i: BrokerProcess(tmp / f"broker-{i}", {**settings, "broker.id": str(i)}).start() for i in (1, 2, 3)}
        single = BrokerProcess(tmp / "single").start()
        try:
            bootstrap = ",".join(b.bootstrap for b in cluster.values())
            rates: dict[str, list[float]] = {"RF=3, 3 brokers": [], "RF=1, 1 broker": []}
            for repeat in range(args.repeats):
                _create(bootstrap, f"rf3-{repeat}", 3, {"min.insync.replicas": "2"})
                _create(single.bootstrap, f"rf1-{repeat}", 1, {})
                rates["RF=3, 3 brokers"].append(_produce(bootstrap, f"rf3-{repeat}", args.records))
                rates["RF=1, 1 broker"].append(_produce(single.bootstrap, f"rf1-{repeat}", args.records))
                console.print(f"repeat {repeat + 1}/{args.repeats} done")
            _create(bootstrap, "failover", 3, {"min.insync.replicas": "2"})
            _produce(bootstrap, "failover", 100)
            killed = _leader(bootstrap, "failover")
            cluster[killed].kill()
            after_kill = _until_acknowledged(bootstrap, "failover")
            cluster[killed].start()
            time.sleep(SESSION_TIMEOUT_MS / 1000)  # let it rejoin before the controlled shutdown
            stopping = _leader(bootstrap, "failover")
            started = time.perf_counter()
            cluster[stopping].stop()
            after_term = time.perf_counter() - started + _until_acknowledged(bootstrap, "failover")
        finally:
            for broker in [*cluster.values(), single]:
                broker.kill()
            zookeeper.stop()
    table = Table(title=f"acks=all, idempotent, {args.records} x 100-byte records, median of {args.repeats}")
    for column in ("case", "records/s", "vs RF=1"):
        table.add_column(column)
    base = statistics.median(rates["RF=1, 1 broker"])
    for case, values in rates.items():
        table.add_row(case, f"{statistics.median(values):,.0f}", f"{statistics.median(values) / base:.2f}x")
    out.print(table)
    failover = Table(title="failover to the next acknowledged produce")
    failover.add_column("failure")
    failover.add_column("seconds")
    failover.add_row(f"SIGKILL the leader (session timeout {SESSION_TIMEOUT_MS} ms)", f"{after_kill:.2f}")
    failover.add_row("SIGTERM the leader (controlled shutdown)", f"{after_term:.2f}")
    out.print(failover)


if __name__ == "__main__":
    main()
