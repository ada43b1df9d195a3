"""Brokers of a ZooKeeper cluster replicating to each other over a SASL_PLAINTEXT inter-broker
listener (inter.broker.listener.name, sasl.mechanism.inter.broker.protocol), authenticated with
SCRAM credentials kept in ZooKeeper, while clients use another listener."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import pytest

from tests.security.conftest import ListenersBroker, add_user, certificates, stop, wait_until  # noqa: F401
from tests.zk.conftest import chroot, zk, zookeeper  # noqa: F401 - fixtures

BROKER_PASSWORD = "inter-broker-secret"


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_followers_replicate_over_an_authenticated_inter_broker_listener(tmp_path, chroot, zk, certificates,  # noqa: F811
                                                                         protocol):
    add_user(tmp_path, "broker", BROKER_PASSWORD, "SCRAM-SHA-512", where=("--zookeeper", chroot))
    settings = {"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1",
                "inter.broker.listener.name": "INTERNAL", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "tidemark.inter.broker.sasl.username": "broker",
                "tidemark.inter.broker.sasl.password": BROKER_PASSWORD}
    if protocol == "SASL_SSL":  # the followers check the leader's certificate against the CA
        settings.update({"ssl.keystore.certificate.chain": certificates["broker.pem"].read_text(),
                         "ssl.keystore.key": certificates["broker.key"].read_text(),
                         "ssl.truststore.location": str(certificates["ca.pem"])})
    brokers = []
    try:
        for broker_id in (1, 2):
            broker = ListenersBroker(tmp_path / f"data{broker_id}", {"CLIENT": "PLAINTEXT", "INTERNAL": protocol},
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
        outcomes = []
        for i in range(5):  # acks=all: answered once the follower has fetched them
            producer.produce("replicated", f"r{i}".encode(), on_delivery=lambda err, msg: outcomes.append(err))
        assert producer.flush(60) == 0
        assert outcomes == [None] * 5
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
