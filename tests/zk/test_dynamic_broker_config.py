"""Dynamic broker settings in a cluster reach every broker through ZooKeeper as in Kafka: the
entity's settings at /config/brokers/<default> or /config/brokers/N ({"version":1,"config":{...}})
and a /config/changes notice ({"version":2,"entity_path":"brokers/<default>"}) that every
broker follows. Shown by what a broker then does (a produce held to message.max.bytes on a
partition led elsewhere), not only by what it describes. Every wait is on an event, bounded."""

from __future__ import annotations

import json

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.zk.test_cluster_brokers import WAIT_S, _bootstrap, _cluster, _until

INCREMENTAL_ALTER_CONFIGS = 44
BROKER_RESOURCE, SET = 4, 0


def _alter(bootstrap: str, resource_name: str, name: str, value: str) -> tuple[int, str | None]:
    """On the wire: librdkafka cannot name the cluster default (resource name "")."""
    with RawClient(bootstrap) as client:
        response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": BROKER_RESOURCE, "resource_name": resource_name, "configs": [
                {"name": name, "config_operation": SET, "value": value}]}], "validate_only": False})
    (result,) = response.responses
    return result.error_code, result.error_message


def _produce(bootstrap: str, topic: str, value: bytes) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "message.max.bytes": 1000000,
                         "message.timeout.ms": WAIT_S * 1000})
    outcome = []
    producer.produce(topic, value, on_delivery=lambda error, _message: outcome.append(error))
    assert producer.flush(WAIT_S) == 0
    return outcome[0]


def _described(broker, broker_id: int, name: str):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("broker", str(broker_id))
    return admin.describe_configs([resource])[resource].result(WAIT_S)[name]


def test_dynamic_settings_reach_every_broker_through_zookeeper(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot, count=2)
    root = "/" + chroot.split("/", 1)[1]
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("on-two", num_partitions=1, replica_assignment=[[2]])])["on-two"].result(WAIT_S)
    assert _produce(_bootstrap(brokers), "on-two", b"x" * 5000) is None

    # The cluster default, set through broker 1, holds broker 2's partition to it.
    assert _alter(brokers[1].bootstrap, "", "message.max.bytes", "1000") == (ErrorCode.none, None)
    assert json.loads(zk.get(f"{root}/config/brokers/<default>")[0]) == {
        "version": 1, "config": {"message.max.bytes": "1000"}}
    notices = sorted(zk.get_children(f"{root}/config/changes"))
    assert json.loads(zk.get(f"{root}/config/changes/{notices[-1]}")[0]) == {
        "version": 2, "entity_path": "brokers/<default>"}
    brokers[2].wait_for_log('"dynamic_broker_configs_reloaded"', timeout_s=WAIT_S)
    error = _produce(_bootstrap(brokers), "on-two", b"x" * 5000)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    entry = _described(brokers[2], 2, "message.max.bytes")
    assert (entry.value, entry.source) == ("1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # Broker 1's own setting is its own: /config/brokers/1, and broker 2 keeps the default.
    assert _alter(brokers[1].bootstrap, "1", "message.max.bytes", "200000") == (ErrorCode.none, None)
    assert json.loads(zk.get(f"{root}/config/brokers/1")[0]) == {"version": 1, "config": {"message.max.bytes": "200000"}}
    assert _described(brokers[1], 1, "message.max.bytes").value == "200000"
    assert _described(brokers[2], 2, "message.max.bytes").value == "1000"
    # Another broker's id is not this broker's to change (Kafka: the request goes to that broker).
    assert _alter(brokers[1].bootstrap, "2", "message.max.bytes", "200000")[0] == ErrorCode.invalid_request

    # A per-broker setting written as Kafka's tools write it (znode, then notice) is taken too.
    zk.ensure_path(f"{root}/config/brokers/2")
    zk.set(f"{root}/config/brokers/2", json.dumps({"version": 1, "config": {"message.max.bytes": "300000"}}).encode())
    zk.create(f"{root}/config/changes/config_change_", json.dumps({"version": 2, "entity_path": "brokers/2"}).encode(),
              sequence=True)
    _until(lambda: _described(brokers[2], 2, "message.max.bytes").value == "300000", "broker 2's own setting")
    assert _produce(_bootstrap(brokers), "on-two", b"x" * 5000) is None

    # A broker restarted later reads its settings before it serves.
    brokers[2].kill()
    brokers[2].start()
    entry = _described(brokers[2], 2, "message.max.bytes")
    assert (entry.value, entry.source) == ("300000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_a_retention_default_changed_on_one_broker_applies_to_the_others_logs(make_broker, chroot, zk):
    """Kafka's log config reload: the new default applies to existing topics without their
    own setting on every broker (shown by DescribeConfigs of the topic on the other broker and
    by its retention loop, which runs every second here)."""
    brokers = _cluster(make_broker, chroot, count=2, **{"log.segment.bytes": "300",
                                                        "log.retention.check.interval.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("kept-on-two", num_partitions=1, replica_assignment=[[2]])])["kept-on-two"].result(WAIT_S)
    for _ in range(4):
        assert _produce(_bootstrap(brokers), "kept-on-two", b"y" * 150) is None
    assert _alter(brokers[1].bootstrap, "", "log.retention.bytes", "0") == (ErrorCode.none, None)
    brokers[2].wait_for_log('"dynamic_broker_configs_reloaded"', timeout_s=WAIT_S)
    resource = ConfigResource("topic", "kept-on-two")
    on_two = AdminClient({"bootstrap.servers": brokers[2].bootstrap})
    retention = on_two.describe_configs([resource])[resource].result(WAIT_S)["retention.bytes"]
    assert (retention.value, retention.source) == ("0", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    brokers[2].wait_for_log('"retention_deleted_segments"', timeout_s=WAIT_S)
