"""advertised.listeners, as Kafka's: the address a broker registers in ZooKeeper and answers in
Metadata, when others must reach it elsewhere than where it listens; unset, the listener."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import free_port
from tidemark.broker.config import BrokerConfig
from tidemark.broker.security import listeners


def _registered(zk, chroot: str, broker_id: int) -> dict:
    root = "/" + chroot.split("/", 1)[1]
    return json.loads(zk.get(f"{root}/brokers/ids/{broker_id}")[0])


@pytest.mark.parametrize("value, message", [
    ("SSL://a:9092", "SSL, which is not in listeners"),
    ("PLAINTEXT://a:9092,PLAINTEXT://b:9093", "PLAINTEXT appears twice"),
    ("PLAINTEXT://0.0.0.0:9092", "nonroutable meta-address 0.0.0.0"),
    ("PLAINTEXT://a:0", "port from 1 to 65535"),
    ("a:9092", "expected NAME://host:port"),
])
def test_an_address_no_one_can_reach_is_refused_at_start(value, message):
    with pytest.raises(ValueError, match=message):
        listeners.resolve(BrokerConfig({"advertised.listeners": value}))


def test_unset_is_the_listener_and_set_is_host_and_port():
    (only,) = listeners.resolve(BrokerConfig())
    assert only.advertised is None
    (only,) = listeners.resolve(BrokerConfig({"advertised.listeners": "PLAINTEXT://proxy.example:19092"}))
    assert (only.advertised.host, only.advertised.port) == ("proxy.example", 19092)


def test_the_registration_and_metadata_carry_the_advertised_address(make_broker, chroot, zk):
    settings = {"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1"}
    advertised = free_port()  # nobody listens there: only its name matters here
    broker = make_broker({**settings, "broker.id": "1",
                          "advertised.listeners": f"PLAINTEXT://127.0.0.1:{advertised}"}).start()
    plain = make_broker({**settings, "broker.id": "2"}).start()

    one = _registered(zk, chroot, 1)
    assert (one["host"], one["port"], one["endpoints"]) == (
        "127.0.0.1", advertised, [f"PLAINTEXT://127.0.0.1:{advertised}"])
    two = _registered(zk, chroot, 2)
    assert (two["host"], two["port"], two["endpoints"]) == ("127.0.0.1", plain.port, [f"PLAINTEXT://{plain.bootstrap}"])
    # Asked where it listens, the broker names the advertised address.
    metadata = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(timeout=30)
    assert {b.id: (b.host, b.port) for b in metadata.brokers.values()} == {
        1: ("127.0.0.1", advertised), 2: ("127.0.0.1", plain.port)}
