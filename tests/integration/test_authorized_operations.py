"""Authorized operations (KIP-430): without an authorizer, Kafka grants every operation a
resource supports, 8 for a topic and 7 for the cluster, and answers Integer.MIN_VALUE when the
request did not ask."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient

from .clients import create_topic
from .raw import RawClient
from tidemark.wire.api_keys import ApiKey

OMITTED = -(2 ** 31)
TOPIC_BITS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))  # READ..DESCRIBE, DESCRIBE/ALTER_CONFIGS
CLUSTER_BITS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # CREATE, ALTER..IDEMPOTENT_WRITE
TOPIC_OPERATIONS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS}
CLUSTER_OPERATIONS = {AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}


def test_confluent_kafka_describes_authorized_operations(broker):
    create_topic(broker.bootstrap, "ops-topic", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=15).result(timeout=30)
    assert set(cluster.authorized_operations) == CLUSTER_OPERATIONS
    assert [node.port for node in cluster.nodes] == [broker.port]
    topics = admin.describe_topics(TopicCollection(["ops-topic"]), include_authorized_operations=True,
                                   request_timeout=15)
    description = topics["ops-topic"].result(timeout=30)
    assert set(description.authorized_operations) == TOPIC_OPERATIONS
    assert len(description.partitions) == 2
    # Not asked: the client reports none.
    plain = admin.describe_cluster(request_timeout=15).result(timeout=30)
    assert not plain.authorized_operations


def _metadata_body(version: int, topics: list[str] | None, topic_ops: bool, cluster_ops: bool) -> dict:
    body = {"topics": None if topics is None else [{"name": name, "topic_id": None} for name in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": topic_ops}
    if version <= 10:
        body["include_cluster_authorized_operations"] = cluster_ops
    return body


@pytest.mark.parametrize("version", [8, 9, 10])
def test_metadata_v8_to_v10_cluster_and_topics(broker, version):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic(f"ops-v{version}").error_code == 0
        asked = client.request(ApiKey.METADATA, version, _metadata_body(version, [f"ops-v{version}", "ops-missing"], True, True))
        not_asked = client.request(ApiKey.METADATA, version, _metadata_body(version, [f"ops-v{version}"], False, False))
    assert asked.cluster_authorized_operations == CLUSTER_BITS
    # Known or not, every topic named gets the bits (Kafka sets them on its whole answer).
    assert [(t.name, t.error_code, t.topic_authorized_operations) for t in asked.topics] == \
        [(f"ops-v{version}", 0, TOPIC_BITS), ("ops-missing", 3, TOPIC_BITS)]
    assert not_asked.cluster_authorized_operations == OMITTED
    assert not_asked.topics[0].topic_authorized_operations == OMITTED


def test_metadata_v12_topics(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("ops-v12").error_code == 0
        asked = client.request(ApiKey.METADATA, 12, _metadata_body(12, ["ops-v12"], True, False))
    assert asked.topics[0].topic_authorized_operations == TOPIC_BITS


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_on_the_wire(broker, version):
    body = {"include_cluster_authorized_operations": True}
    if version >= 1:
        body["endpoint_type"] = 1
    with RawClient(broker.bootstrap) as client:
        asked = client.request(ApiKey.DESCRIBE_CLUSTER, version, body)
        not_asked = client.request(ApiKey.DESCRIBE_CLUSTER, version, {**body, "include_cluster_authorized_operations": False})
    assert asked.error_code == 0
    assert [b.port for b in asked.brokers] == [broker.port]
    assert asked.controller_id == asked.brokers[0].broker_id
    assert asked.cluster_authorized_operations == CLUSTER_BITS
    assert not_asked.cluster_authorized_operations == OMITTED


def test_describe_cluster_of_controllers_is_refused(broker):
    with RawClient(broker.bootstrap) as client:
        answer = client.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
    assert answer.error_code == 114  # MISMATCHED_ENDPOINT_TYPE: a broker is not a controller endpoint
