"""Topic config changes reach every broker: IncrementalAlterConfigs through one broker stores
/config/topics/T with a /config/changes notice in Kafka's JSON, and the partition's leader on
another broker applies it (min.insync.replicas raised above the ISR: NOT_ENOUGH_REPLICAS for
acks=all). Every wait is on an event, bounded."""

from __future__ import annotations

import json

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.raw import RawClient
from tests.zk.test_cluster_brokers import WAIT_S, _bootstrap, _cluster, _until, _zk_isr

INCREMENTAL_ALTER_CONFIGS = 44
TOPIC_RESOURCE, SET = 2, 0


def _produce_one(bootstrap: str, value: bytes) -> KafkaError | None:
    """One acks=all record, not retried: the broker's answer."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": False,
                         "retries": 0, "message.timeout.ms": WAIT_S * 1000})
    outcome = []
    producer.produce("orders", value, partition=0, on_delivery=lambda error, _message: outcome.append(error))
    assert producer.flush(WAIT_S) == 0
    return outcome[0]


def test_a_topic_config_changed_through_one_broker_applies_on_the_leader_elsewhere(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot)
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 1, 3)])["orders"].result(WAIT_S)
    _until(lambda: _zk_isr(zk, chroot, "orders") == {1, 2, 3}, "three in-sync replicas")
    root = "/" + chroot.split("/", 1)[1]
    leader = json.loads(zk.get(f"{root}/brokers/topics/orders/partitions/0/state")[0])["leader"]
    through, down = [b for b in sorted(brokers) if b != leader]
    brokers[down].kill()
    _until(lambda: _zk_isr(zk, chroot, "orders") == {leader, through}, "the killed follower out of the ISR")
    live = {i: b for i, b in brokers.items() if i != down}
    assert _produce_one(_bootstrap(live), b"two in sync") is None

    # Through the other broker, by a request sent to it (librdkafka's AdminClient sends topic
    # config changes to the controller, which may be the leader itself).
    with RawClient(brokers[through].bootstrap) as client:
        response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": TOPIC_RESOURCE, "resource_name": "orders", "configs": [
                {"name": "min.insync.replicas", "config_operation": SET, "value": "3"}]}], "validate_only": False})
    assert [r.error_code for r in response.responses] == [0]
    brokers[through].wait_for_log('"topic_configs_altered"', timeout_s=WAIT_S)
    assert json.loads(zk.get(f"{root}/config/topics/orders")[0])["config"]["min.insync.replicas"] == "3"
    notices = zk.get_children(f"{root}/config/changes")
    assert [json.loads(zk.get(f"{root}/config/changes/{n}")[0]) for n in notices] == [
        {"version": 2, "entity_path": "topics/orders"}]
    assert all(n.startswith("config_change_") and len(n) == len("config_change_") + 10 for n in notices)

    brokers[leader].wait_for_log('"topic_configs_reloaded"', timeout_s=WAIT_S)  # the leader took it
    error = _produce_one(_bootstrap(live), b"below min.insync.replicas")
    assert error is not None and error.code() == KafkaError.NOT_ENOUGH_REPLICAS

    brokers[down].start()  # a broker started later reads the configs as they are
    _until(lambda: _zk_isr(zk, chroot, "orders") == {1, 2, 3}, "three in-sync replicas again")
    assert _produce_one(_bootstrap(brokers), b"three in sync") is None
