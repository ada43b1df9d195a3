"""ACLs on a ZooKeeper cluster: stored in Kafka's /kafka-acl layout (read and written by ZooKeeper-era
tools too), and an ACL created or deleted through one broker is enforced by the other, which
learns it from the change notice. Every wait is on an event, bounded."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from tests.integration.raw import RawClient
from tests.zk.test_cluster_brokers import _cluster, _until
from tidemark.cluster.zk import acls as zk_acls
from tidemark.wire.api_keys import ApiKey

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
ANON = "User:ANONYMOUS"
TOPIC, CLUSTER = 2, 4
LITERAL, PREFIXED = 3, 4
DESCRIBE, ALLOW = 8, 3
TOPIC_AUTHORIZATION_FAILED = 29


def _metadata_code(broker, topic: str) -> int:
    with RawClient(broker.bootstrap) as client:
        answer = client.request(ApiKey.METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                       "include_cluster_authorized_operations": False,
                                       "include_topic_authorized_operations": False})
    return answer.topics[0].error_code


def _acl(name: str, pattern: int) -> dict:
    return {"resource_type": TOPIC, "resource_name": name, "resource_pattern_type": pattern, "principal": ANON,
            "host": "*", "operation": DESCRIBE, "permission_type": ALLOW}


def test_an_acl_created_through_one_broker_is_enforced_by_the_other(make_broker, chroot):
    # As kafka-acls.sh --authorizer-properties zookeeper.connect=... would: straight into ZooKeeper,
    # before any broker runs (the brokers' requests to each other and CreateAcls need the cluster).
    rooted = KazooClient(hosts=chroot, timeout=10.0)
    rooted.start(timeout=30)
    try:
        zk_acls.update(rooted, "Cluster", "kafka-cluster", "LITERAL", lambda old: old + [
            {"principal": ANON, "permissionType": "Allow", "operation": "All", "host": "*"}])
        brokers = _cluster(make_broker, chroot, count=2, **AUTHORIZER)
        with RawClient(brokers[1].bootstrap) as client:
            assert client.create_topic("orders", 1, replication_factor=2).error_code == 0
        assert _metadata_code(brokers[2], "orders") == TOPIC_AUTHORIZATION_FAILED

        with RawClient(brokers[1].bootstrap) as client:
            created = client.request(ApiKey.CREATE_ACLS, 3, {"creations": [_acl("orders", LITERAL), _acl("ord", PREFIXED)]})
        assert [r.error_code for r in created.results] == [0, 0]
        assert _metadata_code(brokers[1], "orders") == 0  # the broker that wrote it, at once
        _until(lambda: _metadata_code(brokers[2], "orders") == 0, "the other broker enforcing the new ACL")

        # Kafka's layout and JSON, and its change notices.
        stored = json.loads(rooted.get("/kafka-acl/Topic/orders")[0])
        assert stored == {"version": 1, "acls": [
            {"principal": ANON, "permissionType": "Allow", "operation": "Describe", "host": "*"}]}
        assert json.loads(rooted.get("/kafka-acl-extended/prefixed/Topic/ord")[0])["acls"][0]["operation"] == "Describe"
        notices = [rooted.get(f"/kafka-acl-changes/{c}")[0] for c in sorted(rooted.get_children("/kafka-acl-changes"))]
        assert b"Topic:orders" in notices
        extended = [json.loads(rooted.get(f"/kafka-acl-extended-changes/{c}")[0])
                    for c in rooted.get_children("/kafka-acl-extended-changes")]
        assert {"version": 1, "resourceType": "TOPIC", "name": "ord", "patternType": "PREFIXED"} in extended

        # Deleted through the second broker: the literal one goes, the prefixed one still allows.
        with RawClient(brokers[2].bootstrap) as client:
            deleted = client.request(ApiKey.DELETE_ACLS, 3, {"filters": [{
                "resource_type_filter": TOPIC, "resource_name_filter": "orders", "pattern_type_filter": LITERAL,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
        assert [len(r.matching_acls) for r in deleted.filter_results] == [1]
        assert not rooted.exists("/kafka-acl/Topic/orders")
        assert _metadata_code(brokers[1], "orders") == 0
        with RawClient(brokers[2].bootstrap) as client:
            client.request(ApiKey.DELETE_ACLS, 3, {"filters": [{
                "resource_type_filter": TOPIC, "resource_name_filter": "ord", "pattern_type_filter": PREFIXED,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]})
        _until(lambda: _metadata_code(brokers[1], "orders") == TOPIC_AUTHORIZATION_FAILED,
               "the first broker enforcing the deletion")
    finally:
        rooted.stop()
        rooted.close()
