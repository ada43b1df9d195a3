"""Consumer groups and committed offsets with real clients: rebalances, restarts, standalone commits."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from tests.conftest import GROUP_SETTINGS
from tests.integration.clients import create_topic, produce_all

PARTITIONS = 6
PER_PARTITION = 1000


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500, **extra})


def _paused_on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
    # Fetch nothing until the test has seen the whole group settle (see _wait_for_assignments).
    consumer.assign(partitions)
    consumer.pause(partitions)


def _settled(assignments: list[list[TopicPartition]], expected_sizes: list[int]) -> bool:
    """Every partition assigned exactly once, in the expected shares: the group's final assignment."""
    partitions = sorted(tp.partition for a in assignments for tp in a)
    return partitions == list(range(PARTITIONS)) and sorted(map(len, assignments)) == sorted(expected_sizes)


def _wait_for_assignments(consumers: list[Consumer], expected_sizes: list[int], bound_s: float = 120.0) -> None:
    """Drive the rebalance (each consumer polled in its own thread, so none waits on another's
    poll) until the group settles on the expected assignment, then start fetching."""
    stop = threading.Event()
    failures: list[str] = []
    # Each consumer's assignment as its own thread last saw it (a consumer's assignment() blocks
    # while another thread is inside its poll()).
    assignments: list[list[TopicPartition]] = [[] for _ in consumers]

    def drive(index: int, consumer: Consumer) -> None:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None:  # paused: nothing may be consumed unseen
                failures.append(f"polled {message.error() or (message.partition(), message.offset())}")
            assignments[index] = consumer.assignment()

    threads = [threading.Thread(target=drive, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + bound_s
    try:
        while not (failures or _settled(assignments, expected_sizes)):
            assert time.monotonic() < deadline, (
                f"assignments {[len(a) for a in assignments]} never became {expected_sizes}")
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not failures, failures
    for consumer in consumers:
        consumer.resume(consumer.assignment())


def _consume_some(consumer: Consumer, seen: dict, limit: int, timeout_s: float = 20.0) -> int:
    """Consume up to `limit` messages, commit synchronously after each batch; return how many."""
    got = 0
    deadline = time.monotonic() + timeout_s
    while got < limit and time.monotonic() < deadline:
        messages = consumer.consume(num_messages=min(100, limit - got), timeout=0.2)
        for msg in messages:
            assert msg.error() is None, msg.error()
            seen[(msg.partition(), msg.offset())].append(msg.value())
            got += 1
        if messages:
            consumer.commit(asynchronous=False)
    return got


def test_three_consumers_rebalance_and_resume_from_commits(group_broker):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "grouped", PARTITIONS)
    produce_all(bootstrap, "grouped", [(i % PARTITIONS, None, b"m%d" % i) for i in range(PARTITIONS * PER_PARTITION)])

    # Every partition starts with a committed offset (0). With none, librdkafka looks up the
    # earliest offset, and pausing the partition while that lookup is in flight (as
    # _paused_on_assign does) leaves a retry timer behind that can fire after a later rebalance
    # and rewind the partition to 0 (seen with librdkafka 2.16's debug log).
    admin = AdminClient({"bootstrap.servers": bootstrap})
    start = [TopicPartition("grouped", p, 0) for p in range(PARTITIONS)]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("three", start)])["three"].result(10)

    consumers = [_consumer(bootstrap, "three") for _ in range(3)]
    for consumer in consumers:
        consumer.subscribe(["grouped"], on_assign=_paused_on_assign)
    _wait_for_assignments(consumers, [2, 2, 2])

    seen: dict = defaultdict(list)
    for consumer in consumers:
        _consume_some(consumer, seen, 900)
    for consumer in consumers:  # everything consumed so far is committed; hold still for the rebalance
        consumer.pause(consumer.assignment())
    leaving = consumers.pop()
    left_partitions = [tp.partition for tp in leaving.assignment()]
    last_commits = {tp.partition: tp.offset for tp in leaving.committed(leaving.assignment(), timeout=10)}
    leaving.close()  # LeaveGroup: the other two take its partitions

    _wait_for_assignments(consumers, [3, 3])
    total = PARTITIONS * PER_PARTITION
    deadline = time.monotonic() + 60
    while len(seen) < total and time.monotonic() < deadline:
        for consumer in consumers:
            _consume_some(consumer, seen, 2000, timeout_s=2)
    assert len(seen) == total, "messages were lost"
    for (partition, offset), values in seen.items():
        assert values == [values[0]] * len(values)
        if len(values) > 1:
            # Re-delivered only after the leaving consumer's last commit on its partitions.
            assert partition in left_partitions and offset >= last_commits[partition]

    committed = consumers[0].committed([TopicPartition("grouped", p) for p in range(PARTITIONS)], timeout=10)
    assert [tp.offset for tp in committed] == [PER_PARTITION] * PARTITIONS
    for consumer in consumers:
        consumer.close()


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_committed_offsets_survive_restart(make_broker, how):
    broker = make_broker(GROUP_SETTINGS).start()
    create_topic(broker.bootstrap, "durable", 3)
    produce_all(broker.bootstrap, "durable", [(i % 3, None, b"d%d" % i) for i in range(300)])
    consumer = _consumer(broker.bootstrap, "survivor")
    consumer.assign([TopicPartition("durable", p, 0) for p in range(3)])
    consumer.commit(offsets=[TopicPartition("durable", 0, 17), TopicPartition("durable", 1, 42),
                             TopicPartition("durable", 2, 99)], asynchronous=False)
    consumer.close()
    if how == "clean":
        assert broker.stop() == 0
    else:
        broker.kill()

    restarted = make_broker(GROUP_SETTINGS, data_dir=broker.data_dir, port=broker.port).start()
    consumer = _consumer(restarted.bootstrap, "survivor")
    deadline = time.monotonic() + 30
    while True:  # the client retries COORDINATOR_LOAD_IN_PROGRESS itself; bound the whole wait
        try:
            committed = consumer.committed([TopicPartition("durable", p) for p in range(3)], timeout=10)
            break
        except KafkaException:
            if time.monotonic() > deadline:
                raise
    assert [tp.offset for tp in committed] == [17, 42, 99]
    consumer.subscribe(["durable"])
    seen: dict = defaultdict(list)
    _consume_some(consumer, seen, 300 - (17 + 42 + 99) + 0, timeout_s=30)
    assert min(o for (p, o) in seen if p == 0) == 17
    assert min(o for (p, o) in seen if p == 1) == 42
    assert min(o for (p, o) in seen if p == 2) == 99
    consumer.close()
    restarted.stop()


def test_standalone_consumer_creates_simple_group(group_broker):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, "standalone", 2)
    consumer = _consumer(bootstrap, "simple-one")
    consumer.assign([TopicPartition("standalone", 0, 0), TopicPartition("standalone", 1, 0)])
    consumer.commit(offsets=[TopicPartition("standalone", 0, 5, "meta-0"), TopicPartition("standalone", 1, 7)],
                    asynchronous=False)
    committed = consumer.committed([TopicPartition("standalone", 0), TopicPartition("standalone", 1),
                                    TopicPartition("standalone", 9 % 2)], timeout=10)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 7), (1, 7)]
    assert committed[0].metadata == "meta-0"
    consumer.close()
