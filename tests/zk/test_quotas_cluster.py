"""Client quotas in a cluster reach every broker through ZooKeeper as in Kafka: the entity's
quotas at /config/users/<user>/clients/<client-id> (or /config/users/<user>,
/config/clients/<client-id>, "<default>" for a default) and a /config/changes notice
({"version":2,"entity_path":"users/alice/clients/app"}) that every broker follows. A quota set
through one broker throttles on the other. Every wait is on an event, bounded."""

from __future__ import annotations

import json

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.zk.test_cluster_brokers import WAIT_S, _cluster, _until

DESCRIBE, ALTER, METADATA = 48, 49, 3
METADATA_BODY = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}


def _alter(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float):
    with RawClient(bootstrap) as client:
        response = client.request(ALTER, 1, {"entries": [{
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            "ops": [{"key": key, "value": value, "remove": False}]}], "validate_only": False})
    (entry,) = response.entries
    return entry.error_code


def _described(bootstrap: str) -> dict:
    with RawClient(bootstrap) as client:
        response = client.request(DESCRIBE, 1, {"components": [], "strict": False})
    assert response.error_code == ErrorCode.none
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def _throttle_ms(bootstrap: str) -> float:
    with RawClient(bootstrap) as client:  # client id "raw-test", user ANONYMOUS
        return client.request(METADATA, 9, METADATA_BODY).throttle_time.total_seconds() * 1000


def test_a_quota_set_through_one_broker_applies_on_the_other(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot, count=2)
    root = "/" + chroot.split("/", 1)[1]
    assert _throttle_ms(brokers[2].bootstrap) == 0

    # Through broker 1: user ANONYMOUS's client raw-test may use almost no request time.
    entity = [("user", "ANONYMOUS"), ("client-id", "raw-test")]
    assert _alter(brokers[1].bootstrap, entity, "request_percentage", 1e-9) == ErrorCode.none
    assert json.loads(zk.get(f"{root}/config/users/ANONYMOUS/clients/raw-test")[0]) == {
        "version": 1, "config": {"request_percentage": "1e-09"}}
    notices = sorted(zk.get_children(f"{root}/config/changes"))
    assert json.loads(zk.get(f"{root}/config/changes/{notices[-1]}")[0]) == {
        "version": 2, "entity_path": "users/ANONYMOUS/clients/raw-test"}
    brokers[2].wait_for_log('"client_quotas_reloaded"', timeout_s=WAIT_S)
    assert _described(brokers[2].bootstrap) == {
        (("user", "ANONYMOUS"), ("client-id", "raw-test")): {"request_percentage": 1e-9}}
    # Any request over it is throttled by one window (Kafka's bound on request-time throttles).
    assert _throttle_ms(brokers[2].bootstrap) == 1000

    # A default client-id quota written as Kafka's tools write it (znode, then notice) is taken too.
    zk.ensure_path(f"{root}/config/clients/<default>")
    zk.set(f"{root}/config/clients/<default>", json.dumps({"version": 1, "config": {"producer_byte_rate": "1024"}}).encode())
    zk.create(f"{root}/config/changes/config_change_",
              json.dumps({"version": 2, "entity_path": "clients/<default>"}).encode(), sequence=True)
    _until(lambda: (("client-id", None),) in _described(brokers[1].bootstrap), "the default client quota on broker 1")
    assert _described(brokers[1].bootstrap)[(("client-id", None),)] == {"producer_byte_rate": 1024.0}

    # A broker that starts later reads every quota ZooKeeper holds.
    late = make_broker({"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "3000", "broker.id": "3",
                        "offsets.topic.num.partitions": "3"}).start()
    assert _described(late.bootstrap) == _described(brokers[1].bootstrap)
    assert _throttle_ms(late.bootstrap) == 1000
