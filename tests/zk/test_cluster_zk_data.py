"""The znodes' JSON byte for byte as Kafka 2.8+/3.x writes it (the strings below are what
zookeeper-shell shows for a Kafka broker), and Kafka's rack-unaware replica assignment."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.assignment import assign_replicas_to_brokers, start_index_for_new_partitions
from tidemark.cluster.zk.errors import InvalidReplicationFactorError

TOPIC_ID = zk_data.topic_id_from_string("cMr3GpVESX2L3byPGf93lQ")


def test_paths() -> None:
    assert zk_data.broker_path(1) == "/brokers/ids/1"
    assert zk_data.topic_path("t") == "/brokers/topics/t"
    assert zk_data.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert zk_data.topic_config_path("t") == "/config/topics/t"
    assert zk_data.delete_topic_path("t") == "/admin/delete_topics/t"
    assert zk_data.isr_change_path() == "/isr_change_notification/isr_change_"
    assert (zk_data.CONTROLLER, zk_data.CONTROLLER_EPOCH) == ("/controller", "/controller_epoch")


def test_broker_registration_json() -> None:
    broker = zk_data.BrokerInfo(id=1, host="kafka-1", port=29092, timestamp_ms=1736198272985)
    assert zk_data.encode_broker(broker) == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka-1:29092"],"jmx_port":-1,"port":29092,"host":"kafka-1",'
        b'"version":5,"timestamp":"1736198272985"}')
    assert zk_data.decode_broker(1, zk_data.encode_broker(broker)) == dataclass_with_endpoints(broker)
    assert json.loads(zk_data.encode_broker(zk_data.BrokerInfo(2, "h", 1, rack="r1")))["rack"] == "r1"


def dataclass_with_endpoints(broker: zk_data.BrokerInfo) -> zk_data.BrokerInfo:
    return zk_data.BrokerInfo(broker.id, broker.host, broker.port, broker.rack, broker.timestamp_ms,
                              broker.jmx_port, (broker.listener,), (("PLAINTEXT", "PLAINTEXT"),))


def test_a_registration_names_each_listener_address() -> None:
    broker = zk_data.decode_broker(1, zk_data.encode_broker(zk_data.BrokerInfo(
        1, "h", 9092, endpoints=("INTERNAL://h:9092", "EXTERNAL://[::1]:9093"),
        protocol_map=(("EXTERNAL", "SASL_SSL"), ("INTERNAL", "PLAINTEXT")))))
    assert (broker.address("INTERNAL"), broker.address("EXTERNAL"), broker.address("OTHER")) == (
        ("h", 9092), ("::1", 9093), None)
    assert dict(broker.protocol_map) == {"EXTERNAL": "SASL_SSL", "INTERNAL": "PLAINTEXT"}


def test_older_broker_registrations_decode() -> None:
    v4 = (b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://10.9.167.48:9092"],'
          b'"jmx_port":9999,"host":"10.9.167.48","timestamp":"1543300074836","port":9092,"version":4}')
    broker = zk_data.decode_broker(1, v4)
    assert (broker.host, broker.port, broker.jmx_port, broker.timestamp_ms) == ("10.9.167.48", 9092, 9999, 1543300074836)
    # Several listeners: the PLAINTEXT one is the address clients use.
    many = (b'{"features":{},"listener_security_protocol_map":{"BROKER":"SSL","EXTERNAL":"PLAINTEXT"},'
            b'"endpoints":["BROKER://b1:9091","EXTERNAL://localhost:29091"],"jmx_port":-1,"port":9091,'
            b'"host":"b1","version":5,"timestamp":"1"}')
    assert (zk_data.decode_broker(2, many).host, zk_data.decode_broker(2, many).port) == ("localhost", 29091)


def test_topic_json() -> None:
    assignment = zk_data.TopicAssignment({0: (2, 3, 1), 1: (3, 1, 2), 2: (1, 2, 3)}, TOPIC_ID)
    kafka = (b'{"partitions":{"0":[2,3,1],"1":[3,1,2],"2":[1,2,3]},"topic_id":"cMr3GpVESX2L3byPGf93lQ",'
             b'"adding_replicas":{},"removing_replicas":{},"version":3}')
    assert zk_data.encode_topic(assignment) == kafka
    assert zk_data.decode_topic(kafka) == assignment
    # Before Kafka 2.8: version 2, no topic id.
    old = zk_data.decode_topic(b'{"version":2,"partitions":{"2":[2,3,1],"1":[1,2,3],"0":[3,1,2]},'
                               b'"adding_replicas":{},"removing_replicas":{}}')
    assert old == zk_data.TopicAssignment({0: (3, 1, 2), 1: (1, 2, 3), 2: (2, 3, 1)}, None)


def test_topic_id_is_kafkas_uuid_string() -> None:
    topic_id = uuid.uuid4()
    text = zk_data.topic_id_to_string(topic_id)
    assert len(text) == 22 and "=" not in text and zk_data.topic_id_from_string(text) == topic_id


def test_partition_state_json() -> None:
    kafka = b'{"controller_epoch":20,"leader":1,"version":1,"leader_epoch":2,"isr":[1,0]}'
    state = zk_data.decode_partition_state(kafka, zk_version=7)
    assert state == zk_data.PartitionState(leader=1, leader_epoch=2, isr=(1, 0), controller_epoch=20, zk_version=7)
    assert zk_data.encode_partition_state(state) == kafka


def test_controller_config_and_isr_change_json() -> None:
    assert zk_data.encode_controller(2, 1673382716473) == b'{"version":1,"brokerid":2,"timestamp":"1673382716473"}'
    assert zk_data.decode_controller(b'{"version":2,"brokerid":1,"timestamp":"1","kraftControllerEpoch":-1}') == 1
    assert zk_data.encode_controller_epoch(12) == b"12" and zk_data.decode_controller_epoch(b"12") == 12
    assert zk_data.encode_topic_config({"retention.ms": 1000, "cleanup.policy": "compact"}) == (
        b'{"version":1,"config":{"retention.ms":"1000","cleanup.policy":"compact"}}')
    assert zk_data.decode_topic_config(b'{"version":1,"config":{"min.insync.replicas":"2"}}') == {"min.insync.replicas": "2"}
    assert zk_data.encode_isr_change([("t", 0)]) == b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'
    assert zk_data.decode_isr_change(zk_data.encode_isr_change([("t", 0), ("u", 4)])) == [("t", 0), ("u", 4)]


def test_assignment_matches_kafkas_for_a_fixed_start_index() -> None:
    # Kafka's AdminTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, start index 0.
    assert assign_replicas_to_brokers([0, 1, 2, 3, 4], 10, 3, start_index=0) == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2)}
    # Broker ids are sorted first, as Kafka sorts the broker metadata.
    assert assign_replicas_to_brokers([3, 1, 2], 3, 2, start_index=1) == {0: (2, 1), 1: (3, 2), 2: (1, 3)}


def test_assignment_spreads_leaders_with_a_random_start() -> None:
    assignment = assign_replicas_to_brokers([1, 2, 3], 6, 3, rng=random.Random(7))
    assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3]
    assert all(sorted(r) == [1, 2, 3] for r in assignment.values())


def test_new_partitions_start_at_partition_zeros_leader() -> None:
    # AdminZkClient.createNewPartitionsAssignment: the first broker whose id is >= that leader.
    assert start_index_for_new_partitions([1, 2, 3], (3, 1)) == 2
    assert start_index_for_new_partitions([1, 3, 5], (2, 3)) == 1
    assert start_index_for_new_partitions([1, 2], (7,)) == 0
    assert assign_replicas_to_brokers([1, 2, 3], 2, 2, start_index=2, start_partition_id=6) == {6: (3, 2), 7: (1, 3)}


def test_replication_factor_above_the_brokers_is_refused() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 4 larger than available brokers: 3."):
        assign_replicas_to_brokers([1, 2, 3], 1, 4)
