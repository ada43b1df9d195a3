"""Readers of __consumer_offsets through the SIGKILL of the leader of a group's offsets
partition, on three brokers: kcat and kafka-python (keys and values decoded with tidemark's own
record codec, no formatter) see every group's commits from before and after; `tidemark groups
describe` answers from every live broker; and once the killed broker is back in sync, `tidemark
offsets dump` prints the same records from each replica's data directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tests.zk.offsets_cluster import OFFSETS_PARTITIONS, WAIT_S, bootstrap, coordinator_of, make_brokers, until, \
    zk_state
from tidemark.coordinator.partitioner import partition_for
from tidemark.records.offsets_schema import OFFSETS_TOPIC, OffsetCommitKey, decode_key, decode_offset_commit_value

GROUPS = ("alpha", "beta", "gamma")
BEFORE, AFTER = 11, 23

# (group, topic, partition) -> the committed offsets in log order
Commits = dict[tuple[str, str, int], list[int]]


def _commit(address: str, group: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _decoded(records) -> Commits:
    """The offset commits among (partition, offset, key, value) records, per key in log order."""
    commits: Commits = defaultdict(list)
    for _, _, key, value in sorted(records, key=lambda r: (r[0], r[1])):
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey) and value is not None:
            commits[(decoded.group, decoded.topic, decoded.partition)].append(decode_offset_commit_value(value).offset)
    return dict(commits)


def _kcat(address: str) -> Commits:
    """kcat reads every offsets partition to its end; each record as a header line with its
    key and value lengths, then the raw key and value bytes."""
    out = subprocess.run(["kcat", "-b", address, "-C", "-t", OFFSETS_TOPIC, "-o", "beginning", "-e", "-q",
                          "-f", "%p %o %K %S\\n%k%s"], capture_output=True, check=True, timeout=WAIT_S).stdout
    records, position = [], 0
    while position < len(out):
        line_end = out.index(b"\n", position)
        partition, offset, key_size, value_size = (int(f) for f in out[position:line_end].split())
        position = line_end + 1
        key = out[position:position + max(key_size, 0)]
        position += max(key_size, 0)
        value = out[position:position + value_size] if value_size >= 0 else None
        position += max(value_size, 0)
        records.append((partition, offset, key, value))
    return _decoded(records)


def _kafka_python(address: str) -> Commits:
    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, request_timeout_ms=10_000)
    try:
        partitions = [KafkaTopicPartition(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        records = []
        until(lambda: _poll_to(consumer, ends, records), "kafka-python at the end of every offsets partition")
        return _decoded(records)
    finally:
        consumer.close()


def _poll_to(consumer: KafkaConsumer, ends, records: list) -> bool:
    for batch in consumer.poll(timeout_ms=500).values():
        records.extend((r.partition, r.offset, r.key, r.value) for r in batch)
    return all(consumer.position(tp) >= end for tp, end in ends.items())


def _described(address: str, group: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tidemark.cli", "groups", "describe", group, "--bootstrap-server",
                          address, "--output", "json"], capture_output=True, text=True, check=True, timeout=WAIT_S)
    return json.loads(out.stdout)


def _dump(data_dir) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "tidemark.cli", "offsets", "dump", "--data-dir", str(data_dir)],
                         capture_output=True, text=True, check=True, timeout=WAIT_S)
    return out.stdout.splitlines()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make system-deps installs it)")
def test_readers_of_the_offsets_topic_see_every_group_through_a_leader_change(make_broker, chroot, zk):
    brokers = make_brokers(make_broker, chroot)
    for broker in brokers.values():
        broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(WAIT_S)
    leader = coordinator_of(brokers[1].bootstrap, GROUPS[0])
    for group in GROUPS:
        _commit(bootstrap(brokers), group, BEFORE)
    before = {(g, "orders", 0): [BEFORE] for g in GROUPS}
    assert _kcat(bootstrap(brokers)) == before
    assert _kafka_python(bootstrap(brokers)) == before

    # SIGKILL the leader of alpha's offsets partition; the commits go on with the new leader.
    index = partition_for(GROUPS[0], OFFSETS_PARTITIONS)
    brokers[leader].kill()
    until(lambda: zk_state(zk, chroot, OFFSETS_TOPIC, index)["leader"] not in (-1, leader), "a new leader")
    live = {i: b for i, b in brokers.items() if i != leader}
    for group in GROUPS:
        _commit(bootstrap(live), group, AFTER)
    after = {(g, "orders", 0): [BEFORE, AFTER] for g in GROUPS}
    assert _kcat(bootstrap(live)) == after
    assert _kafka_python(bootstrap(live)) == after

    for broker in live.values():  # from any broker of the cluster
        for group in GROUPS:
            (described,) = _described(broker.bootstrap, group)
            assert [(p["topic"], p["partition"], p["current_offset"]) for p in described["partitions"]] == \
                [("orders", 0, AFTER)], described

    # The killed broker back and in sync: each replica's log holds the same records.
    brokers[leader].start()
    until(lambda: all(len(zk_state(zk, chroot, OFFSETS_TOPIC, p)["isr"]) == 3 for p in range(OFFSETS_PARTITIONS)),
          "every offsets partition with three in-sync replicas")
    for broker in brokers.values():
        broker.stop()
    dumps = {i: _dump(b.data_dir) for i, b in brokers.items()}
    assert dumps[1] == dumps[2] == dumps[3]
    assert sum(f'"group":"{g}"' in line for line in dumps[1] for g in GROUPS) == 2 * len(GROUPS)
