"""Brokers of a ZooKeeper cluster replicating to each other over a SASL_PLAINTEXT inter-broker
listener (inter.broker.listener.name, sasl.mechanism.inter.broker.protocol), authenticated with
SCRAM credentials kept in ZooKeeper, while clients use another listener."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.security.conftest import ListenersBroker, add_user, stop, wait_until
from tests.zk.conftest import chroot, zk, zookeeper  # noqa: F401 - fixtures

BROKER_PASSWORD = "inter-broker-secret"


def test_followers_replicate_over_an_authenticated_inter_broker_listener(tmp_path, chroot, zk):  # noqa: F811
    add_user(tmp_path, "broker", BROKER_PASSWORD, "SCRAM-SHA-512", where=("--zookeeper", chroot))
    settings = {"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1",
                "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "tidemark.inter.broker.sasl.username": "broker",
                "tidemark.inter.broker.sasl.password": BROKER_PASSWORD}
    brokers = []
    try:
        for broker_id in (1, 2):
            broker = ListenersBroker(tmp_path / f"data{broker_id}", {"CLIENT": "PLAINTEXT", "INTERNAL": "SASL_PLAINTEXT"},
                                     {**settings, "broker.id": str(broker_id)})
            brokers.append(broker.start())
        bootstrap = brokers[0].address("CLIENT")
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("replicated", 1, 2)])["replicated"].result(timeout=60)

        def both_in_sync() -> bool:
            partition = admin.list_topics("replicated", timeout=30).topics["replicated"].partitions[0]
            return sorted(partition.isrs) == [1, 2]

        wait_until(both_in_sync)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
        for i in range(5):
            producer.produce("replicated", f"r{i}".encode())
        assert producer.flush(60) == 0
        # Clients are told the CLIENT listener's addresses; the brokers register both.
        metadata = admin.list_topics(timeout=30)
        assert {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {
            1: brokers[0].address("CLIENT"), 2: brokers[1].address("CLIENT")}
        wait_until(both_in_sync)
        # the follower's fetcher authenticated to the leader as the broker user
        assert any('"principal": "User:broker"' in broker.log_text() for broker in brokers)
    finally:
        for broker in brokers:
            stop(broker)
