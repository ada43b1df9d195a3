"""DescribeGroups' include_authorized_operations (v3+): as Kafka without an authorizer, a group
described without error carries every operation a group supports (READ, DELETE, DESCRIBE as
Kafka's AclOperation bit field); not requested, or for a group not found, the field is
Integer.MIN_VALUE."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.clients import create_topic
from tests.integration.raw import RawClient

OFFSET_COMMIT, DESCRIBE_GROUPS = 8, 15
OMITTED = -2147483648
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ 3, DELETE 6, DESCRIBE 8
TIMEOUT_S = 60.0  # a hang guard


def _standalone_commit(client: RawClient, group: str, topic: str) -> None:
    """A standalone consumer's commit (it creates the group), once the offsets partition loaded."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        response = client.request(OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        code = response.topics[0].partitions[0].error_code
        if code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert code == ErrorCode.none


def _described(client: RawClient, version: int, groups: list[str], include: bool) -> dict[str, tuple[int, int]]:
    response = client.request(DESCRIBE_GROUPS, version, {"groups": groups, "include_authorized_operations": include})
    return {g.group_id: (g.error_code, g.authorized_operations) for g in response.groups}


@pytest.mark.parametrize("version", [3, 5, 6])
def test_raw_describe_groups_reports_all_group_operations_when_asked(broker, version):
    topic, group = f"authz-ops-{version}", f"authz-ops-group-{version}"
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as client:
        _standalone_commit(client, group, topic)
        asked = _described(client, version, [group, "authz-ops-missing"], True)
        assert asked[group] == (ErrorCode.none, GROUP_OPERATIONS)
        if version >= 6:  # KIP-1043: a group not found is an error, and gets no operations
            assert asked["authz-ops-missing"] == (ErrorCode.group_id_not_found, OMITTED)
        else:  # described as Dead without error, so with its operations (as Kafka)
            assert asked["authz-ops-missing"] == (ErrorCode.none, GROUP_OPERATIONS)
        assert _described(client, version, [group], False)[group] == (ErrorCode.none, OMITTED)


def test_confluent_kafka_describe_consumer_groups_gets_read_describe_delete(broker):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AclOperation, AdminClient

    topic, group = "authz-ops-admin", "authz-ops-admin-group"
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.bootstrap) as client:
        _standalone_commit(client, group, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    asked = admin.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=TIMEOUT_S)
    described = asked[group].result(timeout=TIMEOUT_S)
    assert sorted(op.name for op in described.authorized_operations) == sorted(
        op.name for op in (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE))
    plain = admin.describe_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(timeout=TIMEOUT_S)
    assert not plain.authorized_operations
