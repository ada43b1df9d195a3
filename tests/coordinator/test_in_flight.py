"""Requests pipelined while earlier writes are in flight: each handler decides on the latest view
(everything appended, committed or not), so its records are those the same requests would make
one at a time; reads answer from the committed view.

The high watermark moves only when a test says so (the harness's in-memory partition), so the
in-flight window is certain: every request here is handled while the writes before it are
appended and not committed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.partitioner import partition_for
from tidemark.coordinator.result import OffsetsRecord, Result
from tidemark.coordinator.shard import GroupCoordinatorShard
from tidemark.records.offsets_schema import GroupMetadataKey, OffsetCommitKey, decode_key, encode_key
from tidemark.wire.build import build

INSTANCES = ("i0", "i1", "i2", "i3")


def _request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), body)


def _error(code: Any) -> dict[str, Any]:
    return {"error_code": code}


def call(h, group: str, event) -> asyncio.Task[Any]:
    return asyncio.ensure_future(h.coordinator.call(group, event, _error))


def join(h, group: str, instance: str, member: str = "") -> asyncio.Task[Any]:
    request = _request(11, 5, {
        "group_id": group, "session_timeout": 30_000, "rebalance_timeout": 30_000, "member_id": member,
        "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}]})
    return call(h, group, lambda shard, token, now: shard.membership.join_group(request, 5, token, now, "c", "h"))


def sync(h, group: str, instance: str, member: str, generation: int, assignments: list[str]) -> asyncio.Task[Any]:
    request = _request(14, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                               "group_instance_id": instance,
                               "assignments": [{"member_id": m, "assignment": m.encode()} for m in assignments]})
    return call(h, group, lambda shard, token, now: shard.membership.sync_group(request, 3, token, now))


def heartbeat(h, group: str, instance: str, member: str, generation: int) -> asyncio.Task[Any]:
    request = _request(12, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                               "group_instance_id": instance})
    return call(h, group, lambda shard, token, now: Result().respond(
        token, shard.membership.heartbeat(request, 3, now)))


def delete_group(h, group: str) -> asyncio.Task[Any]:
    return call(h, group, lambda shard, token, now: shard.delete_group(group, token, now))


def delete_offsets(h, group: str, partitions: list[int]) -> asyncio.Task[Any]:
    request = _request(47, 0, {"group_id": group, "topics": [
        {"name": "orders", "partitions": [{"partition_index": p} for p in partitions]}]})
    return call(h, group, lambda shard, token, now: shard.delete_offsets(request, token, now))


def fetch(h, group: str, partition: int, require_stable: bool = False) -> Any:
    return h.coordinator.read(
        group, lambda shard: shard.fetch_offsets(group, [("orders", [partition])], require_stable)[0]
        ["partitions"][0], _error)


def fresh_replay(h) -> GroupCoordinatorShard:
    """What a restart loads: a new shard replaying the whole log."""
    live = h.shard.shard
    fresh = GroupCoordinatorShard(0, live.config, live.partition_exists)
    for offset, (key, value) in enumerate(h.writer.records):
        fresh.replay(offset, key, value, now_ms=h.clock.now_ms())
    return fresh


async def stable_static_group(h, group: str) -> dict[str, str]:
    """A Stable group of four static members, all committed: instance id -> member id."""
    joins = [join(h, group, instance) for instance in INSTANCES]
    await h.settle()
    while not all(task.done() for task in joins):  # the initial rebalance delay, extended per join
        h.clock.advance(100)
        await h.settle()
    joined = [task.result() for task in joins]
    assert all(r["error_code"] == ErrorCode.none for r in joined), joined
    members = {instance: r["member_id"] for instance, r in zip(INSTANCES, joined, strict=True)}
    generation = joined[0]["generation_id"]
    leader = joined[0]["leader"]
    syncs = [sync(h, group, instance, member, generation, list(members.values()) if member == leader else [])
             for instance, member in members.items()]
    assert [(await task)["error_code"] for task in syncs] == [ErrorCode.none] * len(INSTANCES)
    return members


def test_static_members_rejoining_together_are_none_of_them_fenced(coordinator_harness):
    """Four static consumers restarted at once (a rolling restart's worst case): each rejoin is
    handled while the others' replacements are in flight, and every new incarnation keeps its
    new member id once all of them commit, as it would one at a time."""
    async def scenario(h):
        await h.start()
        old = await stable_static_group(h, "static")
        generation = h.shard.shard.groups["static"].generation
        h.writer.auto_commit = False
        rejoins = [join(h, "static", instance) for instance in INSTANCES]
        await h.settle()
        assert not any(task.done() for task in rejoins)  # each waits for its record
        assert len(h.writer.records) - h.writer.high_watermark == len(INSTANCES)
        h.writer.commit()
        await h.settle()
        answers = [task.result() for task in rejoins]
        assert [a["error_code"] for a in answers] == [ErrorCode.none] * 4
        new = {instance: a["member_id"] for instance, a in zip(INSTANCES, answers, strict=True)}
        assert set(new.values()).isdisjoint(old.values())
        group = h.shard.shard.groups["static"]
        assert group.static_members == new and set(group.members) == set(new.values())
        h.writer.auto_commit = True
        beats = [heartbeat(h, "static", instance, member, generation) for instance, member in new.items()]
        assert [(await task)["error_code"] for task in beats] == [ErrorCode.none] * 4
        fenced = [heartbeat(h, "static", instance, member, generation) for instance, member in old.items()]
        assert [(await task)["error_code"] for task in fenced] == [ErrorCode.fenced_instance_id] * 4
        assert fresh_replay(h).groups["static"].static_members == new  # and so after a restart

    coordinator_harness(scenario, group_initial_rebalance_delay_ms="100", group_min_session_timeout_ms="1000")


def test_delete_groups_tombstones_a_commit_still_in_flight(coordinator_harness):
    """A commit answered NONE and a DeleteGroups answered NONE: the commit is gone, now and
    after a restart, and the group with it."""
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(3, group="g", partition=0)) == ErrorCode.none
        h.writer.auto_commit = False
        commit = asyncio.ensure_future(h.commit(5, group="g", partition=1))
        deleted = delete_group(h, "g")
        await h.settle()
        assert not commit.done() and not deleted.done()
        h.writer.commit()
        assert h.commit_code(await commit) == ErrorCode.none
        assert (await deleted)["error_code"] == ErrorCode.none
        tombstoned = [decode_key(key) for key, value in h.writer.records if value is None]
        assert OffsetCommitKey("g", "orders", 1) in tombstoned and GroupMetadataKey("g") in tombstoned
        assert (await fetch(h, "g", 1))["committed_offset"] == -1
        groups, error = h.coordinator.list_groups(_request(16, 4, {"states_filter": []}), 4)
        assert error == ErrorCode.none and "g" not in [g["group_id"] for g in groups]
        fresh = fresh_replay(h)
        assert fresh.offsets.group_offsets("g") == {} and "g" not in fresh.groups
        h.writer.auto_commit = True
        assert (await delete_group(h, "g"))["error_code"] == ErrorCode.group_id_not_found

    coordinator_harness(scenario)


def test_delete_groups_of_a_group_only_a_commit_in_flight_made(coordinator_harness):
    """A standalone consumer's first commit is in flight: its group exists for DeleteGroups (the
    latest view), which tombstones the commit; reads never saw the group."""
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False
        commit = asyncio.ensure_future(h.commit(5, group="new", partition=0))
        await h.settle()
        groups, _ = h.coordinator.list_groups(_request(16, 4, {"states_filter": []}), 4)
        assert "new" not in [g["group_id"] for g in groups]  # not committed: not listed
        deleted = delete_group(h, "new")
        await h.settle()
        h.writer.commit()
        assert h.commit_code(await commit) == ErrorCode.none
        assert (await deleted)["error_code"] == ErrorCode.none
        fresh = fresh_replay(h)
        assert fresh.offsets.group_offsets("new") == {} and "new" not in fresh.groups

    coordinator_harness(scenario)


def test_offset_delete_tombstones_a_commit_in_flight_and_leaves_out_partitions_without_one(coordinator_harness):
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(3, group="g", partition=0)) == ErrorCode.none
        h.writer.auto_commit = False
        commit = asyncio.ensure_future(h.commit(5, group="g", partition=1))
        await h.settle()
        deleted = delete_offsets(h, "g", [1])
        await h.settle()
        h.writer.commit()
        assert h.commit_code(await commit) == ErrorCode.none
        answer = await deleted
        assert answer["error_code"] == ErrorCode.none
        assert answer["topics"] == [{"name": "orders", "partitions": [
            {"partition_index": 1, "error_code": ErrorCode.none}]}]
        assert (await fetch(h, "g", 1))["committed_offset"] == -1
        assert fresh_replay(h).offsets.get("g", ("orders", 1)) is None
        h.writer.auto_commit = True
        # Partition 1 has no offset any more, partition 7 never had one: Kafka leaves them out.
        answer = await delete_offsets(h, "g", [0, 1, 7])
        assert answer["topics"] == [{"name": "orders", "partitions": [
            {"partition_index": 0, "error_code": ErrorCode.none}]}]
        assert fresh_replay(h).offsets.group_offsets("g") == {}

    coordinator_harness(scenario)


def test_a_timed_out_commit_committing_late_keeps_a_newer_commit_unstable(coordinator_harness):
    """A commit times out (answered REQUEST_TIMED_OUT) and commits later, while a newer commit
    to the same partition is still in flight: a require_stable OffsetFetch answers
    UNSTABLE_OFFSET_COMMIT, never the older offset."""
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False
        older = asyncio.ensure_future(h.commit(1, group="g", partition=0))
        await h.settle()
        h.clock.advance(200)
        await h.settle()
        assert h.commit_code(older.result()) == ErrorCode.request_timed_out
        newer = asyncio.ensure_future(h.commit(2, group="g", partition=0))
        await h.settle()
        h.writer.commit(to=h.writer.batch_ends[0])  # the older commit's record commits late
        await h.settle()
        stable = await fetch(h, "g", 0, require_stable=True)
        assert stable["error_code"] == ErrorCode.unstable_offset_commit
        assert (await fetch(h, "g", 0))["committed_offset"] == 1  # committed: replayed
        h.writer.commit()
        assert h.commit_code(await newer) == ErrorCode.none
        stable = await fetch(h, "g", 0, require_stable=True)
        assert (stable["error_code"], stable["committed_offset"]) == (ErrorCode.none, 2)

    coordinator_harness(scenario, offsets_commit_timeout_ms="200")


def test_list_groups_while_a_partition_loads_answers_only_the_error(coordinator_harness):
    """Kafka answers COORDINATOR_LOAD_IN_PROGRESS with no groups, not a partial list."""
    async def scenario(h):
        h.topic.partitions = 2
        h.topic.create()
        loading = h.topic.writers[1]
        loading.records.append((OffsetsRecord(encode_key(GroupMetadataKey("other")), None).key, None))
        loading.commit()
        loading.fail_reads = 1_000_000  # partition 1's load fails and is retried
        h.coordinator.start()
        await h.settle()
        group = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, 2) == 0)
        assert h.commit_code(await h.commit(3, group=group)) == ErrorCode.none
        body = _request(16, 4, {"states_filter": []})
        assert h.coordinator.list_groups(body, 4) == ([], ErrorCode.coordinator_load_in_progress)
        loading.fail_reads = 0
        h.clock.advance(60_000)  # the retry's back-off
        await h.settle()
        groups, error = h.coordinator.list_groups(body, 4)
        assert error == ErrorCode.none and [g["group_id"] for g in groups] == [group]

    coordinator_harness(scenario)
