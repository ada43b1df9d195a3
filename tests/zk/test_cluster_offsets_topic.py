"""The offsets topic on a three-broker cluster: created on first use only once
offsets.topic.replication.factor (3) brokers are alive, with three replicas per partition and
tidemark's min.insync.replicas=2; a commit that only one replica could hold is not acknowledged
(COORDINATOR_NOT_AVAILABLE, Kafka's answer to NOT_ENOUGH_REPLICAS) and stays invisible."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kio.schema.errors import ErrorCode

from tests.zk.offsets_cluster import (
    OFFSETS_PARTITIONS,
    WAIT_S,
    bootstrap,
    coordinator_of,
    find_coordinator,
    make_brokers,
    until,
    zk_state,
)
from tidemark.coordinator.partitioner import partition_for

OFFSETS = "__consumer_offsets"
GROUP = "ledger"


def _commit(address: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": address, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _committed(address: str) -> int:
    consumer = Consumer({"bootstrap.servers": address, "group.id": GROUP, "enable.auto.commit": False})
    try:
        (committed,) = consumer.committed([TopicPartition("orders", 0)], timeout=WAIT_S)
        return committed.offset
    finally:
        consumer.close()


def test_offsets_topic_waits_for_three_brokers_and_a_lone_replica_never_acknowledges_a_commit(
        make_broker, chroot, zk):
    brokers = make_brokers(make_broker, chroot)
    brokers[1].start()
    brokers[2].start()
    root = "/" + chroot.split("/", 1)[1]
    until(lambda: sorted(zk.get_children(f"{root}/brokers/ids")) == ["1", "2"], "brokers 1 and 2 registered")
    # Two brokers alive, replication factor 3: Kafka's answer, and no topic is created.
    for broker in (brokers[1], brokers[2]):
        answer = find_coordinator(broker.bootstrap, GROUP)
        assert answer.error_code == ErrorCode.coordinator_not_available, answer
        # the client is told why, not left to retry in silence
        assert answer.error_message == (f"{OFFSETS} cannot be created yet: "
                                        "Replication factor: 3 larger than available brokers: 2."), answer
    assert zk.exists(f"{root}/brokers/topics/{OFFSETS}") is None

    brokers[3].start()
    coordinator = coordinator_of(brokers[1].bootstrap, GROUP)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    topic = until(lambda: admin.list_topics(OFFSETS, timeout=10).topics[OFFSETS], "the offsets topic in Metadata")
    assert len(topic.partitions) == OFFSETS_PARTITIONS
    assert all(sorted(p.replicas) == [1, 2, 3] for p in topic.partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, OFFSETS)
    configs = admin.describe_configs([resource])[resource].result(WAIT_S)
    assert configs["min.insync.replicas"].value == "2"
    assert configs["cleanup.policy"].value == "compact"

    admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(WAIT_S)
    index = partition_for(GROUP, OFFSETS_PARTITIONS)
    until(lambda: len(zk_state(zk, chroot, OFFSETS, index)["isr"]) == 3, "three in-sync offsets replicas")
    _commit(brokers[coordinator].bootstrap, 5)
    assert _committed(brokers[coordinator].bootstrap) == 5

    # Two of the three replicas of the group's offsets partition die; its leader stays.
    for broker_id, broker in brokers.items():
        if broker_id != coordinator:
            broker.kill()
    until(lambda: zk_state(zk, chroot, OFFSETS, index)["isr"] == [coordinator], "the ISR down to the leader")

    alive = brokers[coordinator].bootstrap
    try:
        _commit(alive, 7)
        raise AssertionError("a commit held by one replica was acknowledged")
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.COORDINATOR_NOT_AVAILABLE, exc
    assert _committed(alive) == 5  # nothing of the refused commit is visible
