"""Three tidemark broker processes on a real ZooKeeper: a topic with three replicas, written by
an idempotent confluent-kafka producer with acks=all, survives the SIGKILL of its leader; every
acknowledged record is read back at its acknowledged offset, no offset holds two records, and
once the killed broker is back and caught up the three logs hold the same bytes."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WAIT_S = 60


def _cluster(make_broker, chroot: str, count: int = 3) -> dict[int, object]:
    settings = {"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "3000",
                "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "100",
                "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
    return {i: make_broker({**settings, "broker.id": str(i)}).start() for i in range(1, count + 1)}


def _bootstrap(brokers) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _partition(admin: AdminClient, topic: str):
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0]


def _produce(producer: Producer, values: list[bytes], acked: dict[int, bytes]) -> None:
    def delivered(error, message):
        assert error is None, error
        assert message.offset() not in acked, "two records acknowledged at one offset"
        acked[message.offset()] = message.value()

    for value in values:
        producer.produce("orders", value, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0


def _read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, 0)])
    read: dict[int, bytes] = {}
    deadline = time.monotonic() + WAIT_S
    while len(read) < end and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        assert message.offset() not in read, "a record read twice"
        read[message.offset()] = message.value()
    consumer.close()
    return read


def _log_bytes(data_dir: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted((data_dir / "orders-0").glob("*.log")))


def test_a_replicated_topic_survives_the_loss_of_its_leader(make_broker, chroot):
    brokers = _cluster(make_broker, chroot)
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 1, 3, config={"min.insync.replicas": "2"})])["orders"].result(WAIT_S)
    _until(lambda: len(_partition(admin, "orders").isrs) == 3, "three in-sync replicas")
    first = _partition(admin, "orders")
    assert sorted(first.replicas) == [1, 2, 3]
    # Every broker answers the same view.
    for broker in brokers.values():
        seen = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics("orders", timeout=10)
        assert sorted(seen.brokers) == [1, 2, 3]
        assert seen.topics["orders"].partitions[0].leader == first.leader

    producer = Producer({"bootstrap.servers": _bootstrap(brokers), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    acked: dict[int, bytes] = {}
    _produce(producer, [f"before-{i}".encode() for i in range(200)], acked)

    brokers[first.leader].kill()  # SIGKILL: its ZooKeeper session expires, the controller elects
    _until(lambda: _partition(admin, "orders").leader not in (-1, first.leader), "a new leader")
    _produce(producer, [f"after-{i}".encode() for i in range(200)], acked)

    live = {i: b for i, b in brokers.items() if i != first.leader}
    assert sorted(acked) == list(range(400))  # contiguous offsets, nothing acknowledged twice
    read = _read_all(_bootstrap(live), 400)
    assert read == acked  # every acknowledged record at its acknowledged offset

    brokers[first.leader].start()  # back: it truncates what it may have had alone and catches up
    _until(lambda: len(_partition(admin, "orders").isrs) == 3, "the restarted broker back in the ISR")
    producer.flush(WAIT_S)
    for broker in brokers.values():
        broker.stop()
    logs = {i: _log_bytes(b.data_dir) for i, b in brokers.items()}
    assert logs[1] == logs[2] == logs[3]
