"""The warm standby: a follower of an offsets partition replays it, up to the high watermark,
into the state the leader keeps; it serves and writes nothing; when its broker becomes leader it
serves at once, with groups and offsets as they were.

Two coordinators share one in-memory partition (the leader's log and the follower's replica
are the same records here) and one manual clock.
"""

from __future__ import annotations

import asyncio

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tests.coordinator.conftest import Harness, commit_code, offset_commit
from tidemark.coordinator.group_coordinator import OFFSETS_TOPIC, GroupCoordinator, LoadState
from tidemark.coordinator.group import GroupState
from tidemark.coordinator.result import Result
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

SESSION_MS = 10_000


class Pair:
    """A leading coordinator (the harness's) and a following one on the same partition."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.follower = GroupCoordinator(h.coordinator.config, topic=h.topic, clock=h.clock)

    @property
    def standby(self):
        return self.follower.shards[0]

    async def start(self) -> None:
        await self.h.start()
        self.follower.partition_followed(OFFSETS_TOPIC, 0, 0)
        await self.h.settle()

    async def fail_over(self, epoch: int = 1) -> None:
        """The leader resigns (it follows now) and the follower's broker leads at `epoch`."""
        self.h.coordinator.partition_followed(OFFSETS_TOPIC, 0, epoch)
        self.follower.partition_led(OFFSETS_TOPIC, 0, epoch)
        await self.h.settle()

    async def fetch(self, coordinator: GroupCoordinator, group: str = "g") -> tuple[ErrorCode, int]:
        return await coordinator.read(
            group, lambda shard: (ErrorCode.none, shard.fetch_offsets(group, [("orders", [0])], False)[0]
                                  ["partitions"][0]["committed_offset"]),
            lambda code: (code, -1))

    async def stop(self) -> None:
        await self.follower.stop()


def _run(scenario, **settings: str) -> None:
    async def main() -> None:
        h = Harness({"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
                     **{key.replace("_", "."): value for key, value in settings.items()}})
        pair = Pair(h)
        try:
            await scenario(pair)
        finally:
            await h.coordinator.stop()
            await pair.stop()

    asyncio.run(asyncio.wait_for(main(), timeout=30))


def _join(coordinator: GroupCoordinator, member: str = "") -> asyncio.Future:
    request = build(load_request_schema(ApiKey.JOIN_GROUP, 5), {
        "group_id": "g", "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS, "member_id": member,
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    return asyncio.ensure_future(coordinator.call(
        "g", lambda shard, token, now: shard.membership.join_group(request, 5, token, now, "c", "h"),
        lambda code: {"error_code": code}))


def _sync(coordinator: GroupCoordinator, member: str, generation: int) -> asyncio.Future:
    request = build(load_request_schema(ApiKey.SYNC_GROUP, 3), {
        "group_id": "g", "generation_id": generation, "member_id": member, "group_instance_id": None,
        "assignments": [{"member_id": member, "assignment": b"orders-0"}]})
    return asyncio.ensure_future(coordinator.call(
        "g", lambda shard, token, now: shard.membership.sync_group(request, 3, token, now),
        lambda code: {"error_code": code}))


def _heartbeat(coordinator: GroupCoordinator, member: str, generation: int) -> asyncio.Future:
    request = build(load_request_schema(ApiKey.HEARTBEAT, 3), {"group_id": "g", "generation_id": generation,
                                                 "member_id": member, "group_instance_id": None})
    return asyncio.ensure_future(coordinator.call(
        "g", lambda shard, token, now: Result().respond(token, shard.membership.heartbeat(request, 3, now)),
        lambda code: {"error_code": code}))


async def _stable_member(pair: Pair) -> tuple[str, int]:
    """One consumer joined and synced through the leader: (member id, generation)."""
    h = pair.h
    member = (await _join(h.coordinator))["member_id"]
    joined = await _join(h.coordinator, member)
    assert joined["error_code"] == ErrorCode.none
    synced = await _sync(h.coordinator, member, joined["generation_id"])
    assert synced["error_code"] == ErrorCode.none
    return member, joined["generation_id"]


def test_the_standby_replays_only_below_the_high_watermark_and_serves_nothing():
    async def scenario(pair: Pair) -> None:
        await pair.start()
        h = pair.h
        assert commit_code(await h.commit(1)) == ErrorCode.none
        await h.settle()
        assert pair.standby.state is LoadState.STANDBY
        assert pair.standby.shard.offsets.group_offsets("g")[("orders", 0)].offset == 1
        h.writer.auto_commit = False
        pending = asyncio.ensure_future(h.commit(2))
        await h.settle()
        assert len(h.writer.records) == 2 and h.writer.high_watermark == 1
        assert pair.standby.shard.offsets.group_offsets("g")[("orders", 0)].offset == 1  # not committed yet
        # A follower is not the coordinator: Kafka's NOT_COORDINATOR, for reads and writes.
        assert await pair.fetch(pair.follower) == (ErrorCode.not_coordinator, -1)
        assert commit_code(await offset_commit(pair.follower, 9)) == ErrorCode.not_coordinator
        h.writer.commit()
        await h.settle()
        assert commit_code(pending.result()) == ErrorCode.none
        assert pair.standby.shard.offsets.group_offsets("g")[("orders", 0)].offset == 2

    _run(scenario)


def test_a_promoted_standby_serves_at_once_and_the_group_keeps_its_generation():
    async def scenario(pair: Pair) -> None:
        await pair.start()
        h = pair.h
        member, generation = await _stable_member(pair)
        assert commit_code(await offset_commit(h.coordinator, 7, generation=generation, member=member)) == 0
        await h.settle()
        h.clock.advance(SESSION_MS - 1)  # the member's session is nearly over when the leader goes
        await pair.fail_over()
        assert pair.standby.state is LoadState.ACTIVE
        assert await pair.fetch(pair.follower) == (ErrorCode.none, 7)
        # The old leader answers NOT_COORDINATOR from now on.
        assert await pair.fetch(h.coordinator) == (ErrorCode.not_coordinator, -1)
        # Sessions restart at the promotion (as after a load): the member is still there, in the
        # same generation, with its assignment; no rebalance.
        h.clock.advance(SESSION_MS - 1)
        await h.settle()
        assert (await _heartbeat(pair.follower, member, generation))["error_code"] == ErrorCode.none
        group = pair.standby.shard.groups["g"]
        assert group.state is GroupState.STABLE and group.generation == generation
        assert group.members[member].assignment == b"orders-0"
        assert commit_code(await offset_commit(pair.follower, 8, generation=generation, member=member)) == 0
        assert await pair.fetch(pair.follower) == (ErrorCode.none, 8)

    _run(scenario)


def test_only_the_leader_expires_sessions_and_offsets():
    async def scenario(pair: Pair) -> None:
        await pair.start()
        h = pair.h
        member, generation = await _stable_member(pair)
        assert commit_code(await h.commit(5, group="standalone")) == ErrorCode.none
        await h.settle()
        written = len(h.writer.records)
        h.coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)  # the leader steps down; nobody leads
        await h.settle()
        h.clock.advance(60 * 60_000)  # past every session and the offsets' retention
        await h.settle()
        assert len(h.writer.records) == written  # two followers: nobody wrote
        for coordinator in (h.coordinator, pair.follower):
            runtime = coordinator.shards[0]
            assert runtime.state is LoadState.STANDBY
            assert member in runtime.shard.groups["g"].members
            assert runtime.shard.offsets.group_offsets("standalone")[("orders", 0)].offset == 5

    _run(scenario, offsets_retention_minutes="1", offsets_retention_check_interval_ms="1000")


def test_a_leader_that_resigns_answers_its_uncommitted_commit_not_coordinator_and_stands_by():
    async def scenario(pair: Pair) -> None:
        await pair.start()
        h = pair.h
        assert commit_code(await h.commit(1)) == ErrorCode.none
        h.writer.auto_commit = False
        in_flight = asyncio.ensure_future(h.commit(2))
        await h.settle()
        await pair.fail_over()
        assert commit_code(in_flight.result()) == ErrorCode.not_coordinator  # never acknowledged
        assert h.coordinator.shards[0].state is LoadState.STANDBY
        h.writer.commit()  # the new leader's high watermark passes it: it is in the log after all
        await h.settle()
        assert await pair.fetch(pair.follower) == (ErrorCode.none, 2)
        assert h.coordinator.shards[0].shard.offsets.group_offsets("g")[("orders", 0)].offset == 2

    _run(scenario)


def test_without_the_standby_a_new_leader_loads_and_ends_with_the_same_offsets():
    async def scenario(pair: Pair) -> None:
        await pair.start()
        h = pair.h
        assert pair.standby.state is LoadState.UNLOADED  # a follower keeps nothing
        for offset in (1, 2, 3):
            assert commit_code(await h.commit(offset)) == ErrorCode.none
        h.coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)
        pair.follower.partition_led(OFFSETS_TOPIC, 0, 1)
        assert await pair.fetch(pair.follower) == (ErrorCode.coordinator_load_in_progress, -1)
        await h.settle()
        assert await pair.fetch(pair.follower) == (ErrorCode.none, 3)

    _run(scenario, offsets_standby_replay_enable="false")


def test_a_standby_promoted_during_its_first_replay_finishes_it_as_a_load():
    async def scenario(pair: Pair) -> None:
        h = pair.h
        await h.start()
        for offset in range(1, 11):
            assert commit_code(await h.commit(offset)) == ErrorCode.none
        pair.follower.partition_followed(OFFSETS_TOPIC, 0, 0)
        assert pair.standby.state is LoadState.STANDBY and not pair.standby._loaded
        h.coordinator.partition_followed(OFFSETS_TOPIC, 0, 1)
        pair.follower.partition_led(OFFSETS_TOPIC, 0, 1)
        assert pair.standby.state is LoadState.LOADING
        assert await pair.fetch(pair.follower) == (ErrorCode.coordinator_load_in_progress, -1)
        await h.settle()
        assert pair.standby.state is LoadState.ACTIVE
        assert await pair.fetch(pair.follower) == (ErrorCode.none, 10)

    _run(scenario)
