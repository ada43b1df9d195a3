"""Client quotas in a cluster reach every broker through ZooKeeper as in Kafka: the entity's
quotas at /config/users/<user>/clients/<client-id> (or /config/users/<user>,
/config/clients/<client-id>, "<default>" for a default) and a /config/changes notice
({"version":2,"entity_path":"users/alice/clients/app"}) that every broker follows. A quota set
through one broker throttles on the other. Every wait is on an event, bounded."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tidemark.hold import HOLD_AT, HOLD_RELEASE
from tests.zk.test_cluster_brokers import WAIT_S, _cluster, _until

DESCRIBE, ALTER, METADATA, INCREMENTAL_ALTER_CONFIGS = 48, 49, 3, 44
BROKER_RESOURCE, SET = 4, 0
METADATA_BODY = {"topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
                 "include_cluster_authorized_operations": False}


def _alter(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float):
    with RawClient(bootstrap) as client:
        client.sock.settimeout(WAIT_S)  # a broker held mid-write answers once released
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


def _held_and_other(make_broker, chroot: str, release):
    """Two brokers; the first holds every config write between its read of the znode and its
    write, until `release` exists."""
    settings = {"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "60000",  # outlives the hold
                "offsets.topic.num.partitions": "3"}
    held = make_broker({**settings, "broker.id": "1"}, env={HOLD_AT: "config_write", HOLD_RELEASE: str(release)}).start()
    other = make_broker({**settings, "broker.id": "2"}).start()
    return held, other


def _race(held, release, first, second) -> tuple:
    """`first` through the held broker, held after its read; `second` meanwhile; then released."""
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(first)
        held.wait_for_log('"point": "config_write"', timeout_s=WAIT_S)  # read, not yet written
        answered = second()
        release.touch()
        return pending.result(WAIT_S), answered


def test_concurrent_alters_of_one_entity_through_two_brokers_both_land(make_broker, chroot, zk, tmp_path):
    """Broker 1 is held between reading the entity's znode and writing it; broker 2 changes
    another key of the same entity meanwhile. Broker 1's write must not overwrite it: both
    quotas are stored and in force on both brokers."""
    release = tmp_path / "release"
    held, other = _held_and_other(make_broker, chroot, release)
    root = "/" + chroot.split("/", 1)[1]
    entity = [("client-id", "app")]

    assert _race(held, release, lambda: _alter(held.bootstrap, entity, "producer_byte_rate", 1024),
                 lambda: _alter(other.bootstrap, entity, "consumer_byte_rate", 2048)) == (ErrorCode.none, ErrorCode.none)

    assert json.loads(zk.get(f"{root}/config/clients/app")[0]) == {
        "version": 1, "config": {"consumer_byte_rate": "2048", "producer_byte_rate": "1024"}}
    both = {(("client-id", "app"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}}
    _until(lambda: _described(other.bootstrap) == both, "both quotas on broker 2")
    assert _described(held.bootstrap) == both


def _alter_broker_default(bootstrap: str, name: str, value: str):
    with RawClient(bootstrap) as client:
        client.sock.settimeout(WAIT_S)  # a broker held mid-write answers once released
        response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": BROKER_RESOURCE, "resource_name": "", "configs": [
                {"name": name, "config_operation": SET, "value": value}]}], "validate_only": False})
    (result,) = response.responses
    return result.error_code


def test_concurrent_incremental_broker_config_alters_through_two_brokers_both_land(make_broker, chroot, zk, tmp_path):
    """The cluster-wide broker default (/config/brokers/<default>) takes the same versioned write:
    two IncrementalAlterConfigs of different settings through two brokers at once both land."""
    release = tmp_path / "release"
    held, other = _held_and_other(make_broker, chroot, release)
    root = "/" + chroot.split("/", 1)[1]

    assert _race(held, release, lambda: _alter_broker_default(held.bootstrap, "log.retention.ms", "3600000"),
                 lambda: _alter_broker_default(other.bootstrap, "max.connections.per.ip", "500")) == (
        ErrorCode.none, ErrorCode.none)

    assert json.loads(zk.get(f"{root}/config/brokers/<default>")[0])["config"] == {
        "log.retention.ms": "3600000", "max.connections.per.ip": "500"}


def test_a_user_quota_keeps_the_users_scram_credentials(make_broker, chroot, zk):
    """A user's SCRAM credentials share its /config/users/<user> znode with its quotas: altering
    the quota leaves them there."""
    brokers = _cluster(make_broker, chroot, count=1)
    root = "/" + chroot.split("/", 1)[1]
    credential = "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    zk.create(f"{root}/config/users/alice", json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": credential}}).encode(), makepath=True)

    assert _alter(brokers[1].bootstrap, [("user", "alice")], "consumer_byte_rate", 4096) == ErrorCode.none
    assert json.loads(zk.get(f"{root}/config/users/alice")[0])["config"] == {
        "SCRAM-SHA-256": credential, "consumer_byte_rate": "4096"}
