"""The coordinator as a state machine over its log, over the wire: state changes when records are
committed and replayed, never when the request that wrote them is handled; and Kafka's classic
group semantics where they depend on it (FENCED_INSTANCE_ID on commit, the static leader's
JoinGroup, Dead groups, groups made by commits).

The broker runs in the test's event loop with a held flusher: while it holds, nothing appended
to the offsets topic is durable, so the high watermark stays where the test left it.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, SYNC_GROUP = 8, 9, 10, 11, 12, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
SETTINGS = {"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


def _commit_body(group: str, offset: int, *, topic: str = "orders", generation: int = -1, member: str = "",
                 instance: str | None = None) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": instance, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}


def _commit_code(response) -> ErrorCode:
    return response.topics[0].partitions[0].error_code


async def _fetch(client: AsyncRawClient, group: str) -> int:
    response = await client.request(OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0]}]}], "require_stable": False})
    return response.groups[0].topics[0].partitions[0].committed_offset


def _join_body(group: str, member: str = "", instance: str | None = None) -> dict:
    return {"group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": member,
            "group_instance_id": instance, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": "range", "metadata": b""}]}


def _sync_body(group: str, generation: int, member: str, assignments: dict[str, bytes] | None = None,
               instance: str | None = None) -> dict:
    return {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance,
            "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()]}


async def _describe(client: AsyncRawClient, group: str):
    response = await client.request(DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    return response.groups[0]


async def _listed(client: AsyncRawClient) -> set[str]:
    response = await client.request(LIST_GROUPS, 4, {"states_filter": []})
    return {g.group_id for g in response.groups}


async def _connected(broker) -> AsyncRawClient:
    broker.replicas.create_topic("orders", 1, {})
    client = await AsyncRawClient.connect(broker.port)
    await client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["any"]})
    await until(lambda: all(s.state.value == "active" for s in broker.coordinator.shards.values()))
    return client


async def _static_member(client: AsyncRawClient, group: str, instance: str) -> str:
    """A one-member group whose member is static, Stable at generation 1; its member id."""
    joined = await client.request(JOIN_GROUP, 5, _join_body(group, instance=instance))
    assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
    synced = await client.request(SYNC_GROUP, 5, _sync_body(group, 1, joined.member_id, {joined.member_id: b"A"},
                                                             instance))
    assert synced.error_code == ErrorCode.none
    return joined.member_id


def _run(scenario, tmp_path, **settings: str) -> None:
    async def main() -> None:
        async with running_broker(tmp_path, {**SETTINGS, **settings}) as broker:
            client = await _connected(broker)
            try:
                await scenario(broker, client)
            finally:
                await client.close()

    asyncio.run(asyncio.wait_for(main(), timeout=60))


def test_a_timed_out_commit_is_visible_once_it_becomes_durable_without_a_restart(tmp_path):
    async def scenario(broker, client):
        broker.replicas.flusher.holding = True
        response = await client.request(OFFSET_COMMIT, 8, _commit_body("g", 41))
        assert _commit_code(response) == ErrorCode.request_timed_out
        assert await _fetch(client, "g") == -1  # not committed: not visible
        broker.replicas.flusher.release()  # the record becomes durable after all
        fetched = []

        async def poll() -> None:
            while (offset := await _fetch(client, "g")) != 41:
                fetched.append(offset)

        await poll()
        assert set(fetched) <= {-1}  # nothing else was ever visible on the way

    _run(scenario, tmp_path, **{"offsets.commit.timeout.ms": "200"})


def test_sync_group_answers_wait_for_the_leaders_assignment_to_commit(tmp_path):
    async def scenario(broker, client):
        follower_client = await AsyncRawClient.connect(broker.port)
        leader_id = (await client.request(JOIN_GROUP, 5, _join_body("g"))).member_id  # MEMBER_ID_REQUIRED
        assert (await client.request(JOIN_GROUP, 5, _join_body("g", leader_id))).generation_id == 1  # alone
        follower_id = (await follower_client.request(JOIN_GROUP, 5, _join_body("g"))).member_id
        follower_join = await follower_client.send(JOIN_GROUP, 5, _join_body("g", follower_id))  # held
        leader = await client.request(JOIN_GROUP, 5, _join_body("g", leader_id))  # completes the join
        follower = await follower_client.receive(JOIN_GROUP, 5, follower_join)
        assert (leader.generation_id, follower.generation_id, leader.leader) == (2, 2, leader_id)
        leader_conn, follower_conn = client, follower_client
        runtime = broker.coordinator.shards[0]
        broker.replicas.flusher.holding = True
        follower_sync = asyncio.ensure_future(follower_conn.request(
            SYNC_GROUP, 5, _sync_body("g", 2, follower.member_id)))
        leader_sync = asyncio.ensure_future(leader_conn.request(SYNC_GROUP, 5, _sync_body(
            "g", 2, leader.member_id, {leader.member_id: b"L", follower.member_id: b"F"})))
        await until(lambda: runtime._pending)  # the leader's group record is written, not durable
        observer = await AsyncRawClient.connect(broker.port)
        described = await _describe(observer, "g")  # reads see only committed state
        assert described.group_state == "CompletingRebalance"
        assert not follower_sync.done() and not leader_sync.done()
        broker.replicas.flusher.release()
        assert (await follower_sync).assignment == b"F"
        assert (await leader_sync).assignment == b"L"
        assert (await _describe(observer, "g")).group_state == "Stable"
        for conn in (follower_client, observer):
            await conn.close()

    _run(scenario, tmp_path)


def test_a_sync_group_whose_record_times_out_answers_coordinator_not_available_and_rebalances(tmp_path):
    async def scenario(broker, client):
        member = (await client.request(JOIN_GROUP, 5, _join_body("g"))).member_id
        joined = await client.request(JOIN_GROUP, 5, _join_body("g", member))
        assert joined.generation_id == 1
        broker.replicas.flusher.holding = True
        synced = await client.request(SYNC_GROUP, 5, _sync_body("g", 1, member, {member: b"A"}))
        # Kafka maps a group record's timeout to COORDINATOR_NOT_AVAILABLE (REQUEST_TIMED_OUT is
        # fatal to the Java client's SyncGroup).
        assert synced.error_code == ErrorCode.coordinator_not_available
        heartbeat = await client.request(HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": member,
                                                        "group_instance_id": None})
        assert heartbeat.error_code == ErrorCode.rebalance_in_progress

    _run(scenario, tmp_path, **{"offsets.commit.timeout.ms": "200"})


def test_delete_groups_removes_the_group_when_its_tombstones_are_replayed(tmp_path):
    async def scenario(broker, client):
        assert _commit_code(await client.request(OFFSET_COMMIT, 8, _commit_body("g", 7))) == ErrorCode.none
        broker.replicas.flusher.holding = True
        deleted = asyncio.ensure_future(client.request(DELETE_GROUPS, 2, {"groups_names": ["g"]}))
        runtime = broker.coordinator.shards[0]
        await until(lambda: runtime._pending)
        other = await AsyncRawClient.connect(broker.port)
        # Not committed yet: reads see the group and its offset as they are in the log ...
        assert await _fetch(other, "g") == 7
        assert "g" in await _listed(other)
        # ... while a request behind it is decided on the latest view, where the group is gone
        # already: a second DeleteGroups finds no group, as it would once the first committed.
        again = asyncio.ensure_future(other.request(DELETE_GROUPS, 2, {"groups_names": ["g"]}))
        await until(lambda: len(runtime._pending) == 2)  # answered behind the first: no record
        broker.replicas.flusher.release()
        assert (await deleted).results[0].error_code == ErrorCode.none
        assert (await again).results[0].error_code == ErrorCode.group_id_not_found
        assert await _fetch(other, "g") == -1
        assert "g" not in await _listed(other)
        await other.close()

    _run(scenario, tmp_path)


def test_commit_from_a_replaced_static_member_is_fenced(tmp_path):
    async def scenario(broker, client):
        old_id = await _static_member(client, "g", "i1")
        rejoined = await client.request(JOIN_GROUP, 5, _join_body("g", instance="i1"))
        assert rejoined.error_code == ErrorCode.none and rejoined.member_id != old_id
        response = await client.request(OFFSET_COMMIT, 8, _commit_body("g", 3, generation=1, member=old_id,
                                                                         instance="i1"))
        assert _commit_code(response) == ErrorCode.fenced_instance_id
        response = await client.request(OFFSET_COMMIT, 8, _commit_body("g", 3, generation=1,
                                                                         member=rejoined.member_id, instance="i1"))
        assert _commit_code(response) == ErrorCode.none

    _run(scenario, tmp_path)


def test_a_static_leader_rejoining_before_v9_is_not_told_it_leads(tmp_path):
    async def scenario(broker, client):
        old_id = await _static_member(client, "g", "i1")
        rejoined = await client.request(JOIN_GROUP, 5, _join_body("g", instance="i1"))
        # The leader from before the replacement: the member must not run an assignment again.
        assert (rejoined.leader, rejoined.generation_id, rejoined.members) == (old_id, 1, ())
        again = await client.request(JOIN_GROUP, 9, _join_body("g", instance="i1"))
        # v9+: told it leads, with the members, and to skip the assignment (KIP-814).
        assert again.leader == again.member_id == again.members[0].member_id and again.skip_assignment

    _run(scenario, tmp_path)


def test_a_commit_to_unknown_topics_creates_no_group(tmp_path):
    async def scenario(broker, client):
        response = await client.request(OFFSET_COMMIT, 8, _commit_body("ghost", 1, topic="nowhere"))
        assert _commit_code(response) == ErrorCode.unknown_topic_or_partition
        assert "ghost" not in await _listed(client)
        assert _commit_code(await client.request(OFFSET_COMMIT, 8, _commit_body("real", 1))) == ErrorCode.none
        assert "real" in await _listed(client)  # the replayed commit made it

    _run(scenario, tmp_path)
