"""`tidemark zk migrate-offsets`: ZooKeeper-stored offsets into the offsets topic; consumers of
each migrated group resume exactly there; groups with live members are refused, and groups that
ran with dual commit (the cluster has offsets for them) are skipped."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.clients import create_topic, produce_all

ZK_OFFSETS = {
    "mig-a": {("mig-t", 0): 3, ("mig-t", 1): 5, ("mig-t", 2): 0},
    "mig-b": {("mig-t", 0): 7, ("mig-u", 0): 2},
}


def migrate(zookeeper, broker, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemark.cli", "zk", "migrate-offsets", "--zookeeper", zookeeper.connect,
         "--bootstrap-server", broker.bootstrap, *extra],
        capture_output=True, text=True, timeout=120)


def kafka_committed(broker, group: str) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(timeout=30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def resume(broker, group: str, topics: list[str], expected: int) -> dict[tuple[str, int], list[int]]:
    """A group member (subscribe, latest for partitions without an offset) reads `expected` records."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "latest", "enable.auto.commit": False})
    consumer.subscribe(topics)
    seen: dict[tuple[str, int], list[int]] = defaultdict(list)
    count = 0
    deadline = time.monotonic() + 60
    try:
        while count < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                assert msg.error() is None, msg.error()
                seen[msg.topic(), msg.partition()].append(msg.offset())
                count += 1
        # Nothing beyond: a short drain shows no record before the committed offsets came too.
        for msg in consumer.consume(num_messages=100, timeout=1.0):
            seen[msg.topic(), msg.partition()].append(msg.offset())
    finally:
        consumer.close()
    return dict(seen)


def test_migrated_groups_resume_at_the_zookeeper_offsets(zookeeper, zk, make_broker) -> None:
    broker = make_broker({"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, "mig-t", 3)
    create_topic(broker.bootstrap, "mig-u", 1)
    produce_all(broker.bootstrap, "mig-t", [(p, None, b"v") for p in range(3) for _ in range(10)])
    produce_all(broker.bootstrap, "mig-u", [(0, None, b"v") for _ in range(4)])
    for group, offsets in ZK_OFFSETS.items():
        for (topic, partition), offset in offsets.items():
            zk.create(f"/consumers/{group}/offsets/{topic}/{partition}", str(offset).encode(), makepath=True)
    # A group whose ZooKeeper consumer is still running.
    zk.create("/consumers/mig-live/offsets/mig-t/0", b"4", makepath=True)
    zk.create("/consumers/mig-live/ids/host:1234", b'{"mig-t": 1}', ephemeral=True, makepath=True)
    # A group that ran with dual commit and then rolled back to ZooKeeper: both stores hold
    # offsets; its consumers resume from the larger, so the migration leaves both alone.
    zk.create("/consumers/mig-dual/offsets/mig-t/0", b"9", makepath=True)
    zk.create("/consumers/mig-dual/offsets/mig-t/1", b"2", makepath=True)
    dual = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mig-dual", "enable.auto.commit": False})
    dual.commit(offsets=[TopicPartition("mig-t", 0, 6), TopicPartition("mig-t", 1, 4)], asynchronous=False)
    dual.close()

    dry = migrate(zookeeper, broker, "--group", "mig-a", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would move" in dry.stdout and kafka_committed(broker, "mig-a") == {}

    done = migrate(zookeeper, broker)
    assert done.returncode == 1  # mig-live was refused
    assert "mig-live" in done.stderr and "refused" in done.stdout
    assert kafka_committed(broker, "mig-live") == {}
    assert kafka_committed(broker, "mig-dual") == {("mig-t", 0): 6, ("mig-t", 1): 4}
    assert "skipped: the cluster has offsets for 2 partition(s)" in done.stdout
    for group, offsets in ZK_OFFSETS.items():
        assert kafka_committed(broker, group) == offsets

    # Each group resumes exactly where ZooKeeper said (latest where it had no offset).
    seen_a = resume(broker, "mig-a", ["mig-t"], expected=7 + 5 + 10)
    assert seen_a == {("mig-t", 0): list(range(3, 10)), ("mig-t", 1): list(range(5, 10)),
                      ("mig-t", 2): list(range(0, 10))}
    seen_b = resume(broker, "mig-b", ["mig-t", "mig-u"], expected=3 + 2)
    assert seen_b == {("mig-t", 0): list(range(7, 10)), ("mig-u", 0): [2, 3]}

    # Run again: a migrated group has offsets in the cluster now, and is left alone.
    again = migrate(zookeeper, broker, "--group", "mig-a")
    assert again.returncode == 0, again.stderr
    assert "moved" not in again.stdout and "skipped" in again.stdout
