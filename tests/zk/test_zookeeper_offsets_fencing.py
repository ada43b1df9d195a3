"""offsets.storage=zookeeper keeps zombie fencing: an OffsetCommit v1+ passes the coordinator's
member and generation checks before anything is written to the znodes, as Kafka's v1+ commits
did; only v0 (Kafka 0.8.1's ZooKeeper commit) is unchecked."""

from __future__ import annotations

import time

import pytest
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic
from tests.integration.raw import RawClient
from tests.zk.test_broker_zookeeper_offsets import ZK_SETTINGS, _v0_frame, znode_offset
from tidemark.wire import offsets_v0

FIND_COORDINATOR, OFFSET_COMMIT, JOIN_GROUP, SYNC_GROUP = 10, 8, 11, 14
TOPIC, GROUP = "zk-fenced", "zk-fenced-group"
SESSION_MS = 300_000  # the member stays for the whole test
WAIT_S = 60.0  # a hang guard


@pytest.fixture(scope="module")
def zk_broker(zookeeper, tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("zk-fencing") / "data"
    process = BrokerProcess(data_dir, {**ZK_SETTINGS, "zookeeper.connect": zookeeper.connect}).start()
    yield process
    process.kill()


def _join_alone(client: RawClient) -> str:
    """A one-member consumer group, Stable at generation 1 (retried while its partition loads)."""
    body = {"group_id": GROUP, "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    deadline = time.monotonic() + WAIT_S
    while (first := client.request(JOIN_GROUP, 5, body)).error_code != ErrorCode.member_id_required:
        assert first.error_code == ErrorCode.coordinator_load_in_progress and time.monotonic() < deadline, first
        time.sleep(0.05)
    joined = client.request(JOIN_GROUP, 5, {**body, "member_id": first.member_id})
    assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
    synced = client.request(SYNC_GROUP, 3, {"group_id": GROUP, "generation_id": 1, "member_id": first.member_id,
                                            "group_instance_id": None,
                                            "assignments": [{"member_id": first.member_id, "assignment": b""}]})
    assert synced.error_code == ErrorCode.none
    return first.member_id


def _commit(client: RawClient, version: int, generation: int, member: str, offset: int) -> ErrorCode:
    body = {"group_id": GROUP, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time": -1, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}
    return client.request(OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


def _commit_old(client: RawClient, version: int, generation: int, member: str, offset: int) -> ErrorCode:
    """OffsetCommit v0 or v1 (hand-encoded)."""
    request = offsets_v0.OffsetCommitV0Request(
        group_id=GROUP, generation_id_or_member_epoch=generation, member_id=member,
        topics=(offsets_v0.OffsetCommitV0Topic(TOPIC, (offsets_v0.OffsetCommitV0Partition(0, offset, None, -1),)),))
    client.send_frame(_v0_frame(OFFSET_COMMIT, version, 7, offsets_v0.write_offset_commit(request, version)))
    answer, _ = offsets_v0.read_offset_commit_response(client.recv_frame(), 4)
    return answer.topics[0].partitions[0].error_code


def test_a_zombie_commit_does_not_move_a_stable_groups_znode(zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, TOPIC, 1)
    with RawClient(zk_broker.bootstrap) as client:
        assert client.request(FIND_COORDINATOR, 1, {"key": GROUP, "key_type": 0}).error_code == ErrorCode.none
        member = _join_alone(client)
        assert _commit(client, 8, 1, member, 100) == ErrorCode.none
        assert znode_offset(zk, GROUP, TOPIC, 0) == b"100"

        # The review's zombie: generation 999, a member the group does not have.
        assert _commit(client, 8, 999, "zombie", 3) == ErrorCode.unknown_member_id
        assert _commit(client, 2, 999, "zombie", 3) == ErrorCode.unknown_member_id
        assert _commit_old(client, 1, 999, "zombie", 3) == ErrorCode.unknown_member_id
        # The member itself, at a generation that is not the group's.
        assert _commit(client, 8, 999, member, 4) == ErrorCode.illegal_generation
        # No member and no generation: only an Empty group takes it.
        assert _commit(client, 8, -1, "", 5) == ErrorCode.unknown_member_id
        assert znode_offset(zk, GROUP, TOPIC, 0) == b"100"

        # v0 has no generation to check: it writes, as Kafka 0.8's ZooKeeper commit did.
        assert _commit_old(client, 0, -1, "", 6) == ErrorCode.none
        assert znode_offset(zk, GROUP, TOPIC, 0) == b"6"
        assert _commit(client, 8, 1, member, 101) == ErrorCode.none
        assert znode_offset(zk, GROUP, TOPIC, 0) == b"101"
