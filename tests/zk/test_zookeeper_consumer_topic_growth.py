"""A ZooKeeper consumer rebalances when a subscribed topic gains partitions (Kafka's
ZKTopicPartitionChangeListener: a watch on /brokers/topics/[topic]'s data): on a ZooKeeper
cluster broker, a topic grown from 2 to 4 partitions is consumed from all 4."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewPartitions
from kio.schema.errors import ErrorCode

from tests.integration.clients import create_topic, produce_all
from tests.integration.raw import RawClient
from tests.zk.consumer_process import WAIT_S, ConsumerProcess, Journal, latest_assignments

FIND_COORDINATOR = 10
TOPIC, GROUP = "zkc-grown", "zkc-grown-group"
CONFIG = {"auto.offset.reset": "smallest", "auto.commit.interval.ms": "200", "rebalance.backoff.ms": "200",
          "rebalance.max.retries": "50"}


def test_a_grown_topic_is_rebalanced_and_its_new_partitions_consumed(chroot, zk, make_broker, tmp_path) -> None:
    broker = make_broker({"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1",
                          "offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, TOPIC, 2)
    # The offsets topic first (librdkafka's consumer looks its coordinator up, which creates it):
    # a topic created later would rebalance the consumer too, grown topic or not.
    with RawClient(broker.bootstrap) as client:
        assert client.request(FIND_COORDINATOR, 1, {"key": GROUP, "key_type": 0}).error_code in (
            ErrorCode.none, ErrorCode.coordinator_not_available)
    root = "/" + chroot.split("/", 1)[1]
    assert zk.exists(f"{root}/brokers/topics/__consumer_offsets") is not None
    journal = Journal()
    consumer = ConsumerProcess(journal, chroot, broker.bootstrap, GROUP, TOPIC, CONFIG, tmp_path).start()
    try:
        def assigned(partitions: int) -> bool:
            latest = latest_assignments(journal, [consumer]).get(consumer.consumer_id)
            return latest is not None and sorted(latest["partitions"]) == [f"{TOPIC}/{p}" for p in range(partitions)]

        journal.wait_for(lambda: assigned(2), "the consumer owns both partitions")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions(TOPIC, 4)])[TOPIC].result(timeout=WAIT_S)
        journal.wait_for(lambda: assigned(4), "the consumer owns all four partitions after the topic grew")

        produce_all(broker.bootstrap, TOPIC, [(p, None, b"after-%d" % p) for p in range(4)])
        journal.wait_for(lambda: {r["partition"] for r in journal.of("record") if r["topic"] == TOPIC} == {0, 1, 2, 3},
                         "a record from each of the four partitions")
    finally:
        consumer.terminate()
