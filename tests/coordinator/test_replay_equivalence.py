"""Replay equivalence: the live coordinator is always what its committed log says.

Hypothesis drives one offsets partition through any sequence of requests (commits, static
members joining, syncing, heartbeating and leaving, DeleteGroups, OffsetDelete), clock moves,
high watermark moves, and appends that fail or time out. After every step, what reads show (the
offsets OffsetFetch returns) is exactly what a fresh shard replaying the log up to the high
watermark holds: nothing uncommitted is ever visible. At the end, with everything committed,
the live shard's offsets and every persisted group (generation, protocol, leader, members and
their assignments) are exactly a fresh replay's.

The sequential model: the same requests (commits, static members rejoining a Stable group,
DeleteGroups, OffsetDelete, offset expiry), pipelined behind writes in flight, write exactly
the records and give exactly the answers they give one at a time.

A second coordinator follows the same log as a warm standby (a follower's replica of the
partition): after every step it holds exactly a fresh replay of the log below the high
watermark, offsets and groups, and it never writes; at the end it becomes leader and serves at
once with that state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from tests.coordinator.conftest import Harness, commit_code, offset_commit
from tests.coordinator.test_in_flight import INSTANCES as MODEL_INSTANCES
from tests.coordinator.test_in_flight import delete_group as model_delete_group
from tests.coordinator.test_in_flight import delete_offsets as model_delete_offsets
from tests.coordinator.test_in_flight import join as model_join
from tests.coordinator.test_in_flight import stable_static_group
from tidemark.coordinator.group_coordinator import OFFSETS_TOPIC, GroupCoordinator, LoadState
from tidemark.coordinator.group import GroupState
from tidemark.coordinator.shard import GroupCoordinatorShard
from tidemark.records.offsets_schema import GroupMetadataKey, decode_key
from tidemark.wire.build import build

GROUPS = ("g1", "g2")
INSTANCES = ("i0", "i1", "i2")
COMMIT_TIMEOUT_MS = 5_000
SESSION_MS = 10_000


def _error_response(code: Any) -> dict[str, Any]:
    return {"error_code": code}


def _request(api_key: int, version: int, body: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), body)


class Driver:
    """Turns generated steps into requests on a Harness's coordinator (not awaited: held
    requests stay held) and checks the invariants."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.calls: list[asyncio.Future[Any]] = []

    @property
    def shard(self) -> GroupCoordinatorShard:
        return self.h.shard.shard

    def _call(self, group: str, event) -> None:
        self.calls.append(asyncio.ensure_future(self.h.coordinator.call(group, event, _error_response)))

    def _member(self, group: str, instance: str) -> tuple[str, int]:
        """The live member id and generation a client of `instance` would use."""
        live = self.shard.groups.get(group)
        if live is None:
            return "", -1
        return live.static_members.get(instance, ""), live.generation

    # -- steps --------------------------------------------------------------------------------

    def commit(self, group: str, partition: int, offset: int, instance: str | None) -> None:
        member, generation = self._member(group, instance) if instance else ("", -1)
        request = _request(8, 8, {
            "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": instance if member else None, "topics": [{"name": "orders", "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": f"m{offset}"}]}]})
        self._call(group, lambda shard, token, now: shard.commit_offsets(request, 8, token, now))

    def join(self, group: str, instance: str, protocol: str) -> None:
        member, _ = self._member(group, instance)
        request = _request(11, 5, {
            "group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": SESSION_MS,
            "member_id": member if member and protocol == "range" else "", "group_instance_id": instance,
            "protocol_type": "consumer", "protocols": [{"name": protocol, "metadata": instance.encode()}]})
        self._call(group, lambda shard, token, now: shard.membership.join_group(request, 5, token, now, "c", "h"))

    def sync(self, group: str, instance: str) -> None:
        member, generation = self._member(group, instance)
        live = self.shard.groups.get(group)
        assignments = [{"member_id": m, "assignment": f"{m}@{generation}".encode()}
                       for m in (live.members if live else ())]
        request = _request(14, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                                   "group_instance_id": instance, "assignments": assignments})
        self._call(group, lambda shard, token, now: shard.membership.sync_group(request, 3, token, now))

    def heartbeat(self, group: str, instance: str) -> None:
        member, generation = self._member(group, instance)
        request = _request(12, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                                   "group_instance_id": instance})

        def event(shard, token, now):
            from tidemark.coordinator.result import Result
            return Result().respond(token, shard.membership.heartbeat(request, 3, now))

        self._call(group, event)

    def leave(self, group: str, instance: str) -> None:
        member, _ = self._member(group, instance)
        request = _request(13, 3, {"group_id": group, "members": [
            {"member_id": member, "group_instance_id": instance}]})
        self._call(group, lambda shard, token, now: shard.membership.leave_group(request, 3, token, now))

    def delete_group(self, group: str) -> None:
        self._call(group, lambda shard, token, now: shard.delete_group(group, token, now))

    def delete_offsets(self, group: str, partition: int) -> None:
        request = _request(47, 0, {"group_id": group, "topics": [
            {"name": "orders", "partitions": [{"partition_index": partition}]}]})
        self._call(group, lambda shard, token, now: shard.delete_offsets(request, token, now))

    # -- invariants ---------------------------------------------------------------------------

    def replayed(self, upto: int) -> GroupCoordinatorShard:
        """A fresh shard that replayed the log below `upto`."""
        fresh = GroupCoordinatorShard(0, self.shard.config, self.shard.partition_exists)
        for offset, (key, value) in enumerate(self.h.writer.records[:upto]):
            fresh.replay(offset, key, value, now_ms=self.h.clock.now_ms())
        return fresh

    @staticmethod
    def offsets(shard: GroupCoordinatorShard) -> dict[str, Any]:
        return {group: {tp: (o.offset, o.metadata) for tp, o in shard.offsets.group_offsets(group).items()}
                for group in GROUPS if shard.offsets.group_offsets(group)}

    def check_reads(self) -> None:
        """OffsetFetch shows exactly the committed log's offsets."""
        assert self.offsets(self.shard) == self.offsets(self.replayed(self.h.writer.high_watermark))

    def written_groups(self, upto: int) -> set[str]:
        """Groups whose newest GroupMetadata record below `upto` is a value: a group whose newest
        record is a tombstone and that exists again was made by a later commit's replay."""
        newest: dict[str, bytes | None] = {}
        for k, value in self.h.writer.records[:upto]:
            key = decode_key(k)
            if isinstance(key, GroupMetadataKey):
                newest[key.group] = value
        return {group for group, value in newest.items() if value is not None}

    def check_standby(self, standby: GroupCoordinatorShard) -> None:
        """The standby is a fresh replay of the committed log: the same offsets and groups."""
        upto = self.h.writer.high_watermark
        fresh = self.replayed(upto)
        assert self.offsets(standby) == self.offsets(fresh)
        assert set(standby.groups) == set(fresh.groups)
        for group_id, persisted in fresh.groups.items():
            assert self.persisted(group_id, standby.groups[group_id], upto) == \
                self.persisted(group_id, persisted, upto)

    def persisted(self, group_id: str, group: Any, upto: int) -> Any:
        """What the log below `upto` says of a group (when a group made by a commit's replay
        became Empty is not in the log, so that stamp is left out: Kafka stamps such a group with
        the time it is loaded, so a replay later than the live commit stamps it later)."""
        value = group.to_metadata_value()
        if group_id not in self.written_groups(upto):
            value = dataclasses.replace(value, current_state_timestamp=-1)
        return value

    def check_equivalent(self) -> None:
        fresh = self.replayed(len(self.h.writer.records))
        assert self.offsets(self.shard) == self.offsets(fresh)
        for group_id, persisted in fresh.groups.items():
            live = self.shard.groups.get(group_id)
            assert live is not None, group_id
            if live.state in (GroupState.STABLE, GroupState.EMPTY) and persisted.generation == live.generation:
                upto = len(self.h.writer.records)
                assert self.persisted(group_id, live, upto) == self.persisted(group_id, persisted, upto), group_id
        for group_id, live in self.shard.groups.items():
            if group_id not in fresh.groups:
                # Only what Kafka keeps in memory alone: a group mid-rebalance, or never written.
                assert live.state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE) \
                    or live.generation == 0 or not live.members, live


groups = st.sampled_from(GROUPS)
instances = st.sampled_from(INSTANCES)
steps = st.lists(st.one_of(
    st.tuples(st.just("commit"), groups, st.integers(0, 1), st.integers(0, 1000), st.none() | instances),
    st.tuples(st.just("join"), groups, instances, st.sampled_from(["range", "range", "sticky"])),
    st.tuples(st.just("sync"), groups, instances),
    st.tuples(st.just("heartbeat"), groups, instances),
    st.tuples(st.just("leave"), groups, instances),
    st.tuples(st.just("delete_group"), groups),
    st.tuples(st.just("delete_offsets"), groups, st.integers(0, 1)),
    st.tuples(st.just("advance"), st.sampled_from([0, 1, 1_000, COMMIT_TIMEOUT_MS, SESSION_MS, 40_000])),
    st.tuples(st.just("commit_log"), st.booleans()),
    st.tuples(st.just("fail_next_append")),
), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=steps)
# A group deleted, then made again by commits whose replay came later than the live commits.
@example(steps=[("commit", "g1", 0, 0, None)] * 3 + [("delete_group", "g1")] + [("commit", "g1", 0, 0, None)] * 2
         + [("advance", 1)])
@example(steps=[("commit", "g1", 0, 0, None)] * 3 + [("delete_group", "g1")] + [("commit", "g1", 0, 0, None)] * 3
         + [("commit_log", True)] + [("commit", "g1", 0, 0, None)] * 2 + [("advance", 1)])
# A group deleted and joined afresh while its old assignment record was in flight: that record,
# committing, must not make the new group (at generation 1 again) Stable.
@example(steps=[("join", "g1", "i0", "range"), ("sync", "g1", "i0"), ("commit", "g1", 0, 0, None),
                ("leave", "g1", "i0"), ("delete_group", "g1"), ("join", "g1", "i0", "range")])
def test_the_live_shard_is_always_its_committed_log_replayed(steps):
    async def scenario() -> None:
        h = Harness({"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
                     "offsets.commit.timeout.ms": str(COMMIT_TIMEOUT_MS),
                     "group.min.session.timeout.ms": "1000"})
        follower = GroupCoordinator(h.coordinator.config, topic=h.topic, clock=h.clock)
        try:
            await h.start()
            follower.partition_followed(OFFSETS_TOPIC, 0, 0)
            standby = follower.shards[0]
            h.writer.auto_commit = False
            driver = Driver(h)
            for step in steps:
                kind, args = step[0], step[1:]
                if kind == "advance":
                    h.clock.advance(args[0])
                elif kind == "commit_log":
                    writer = h.writer
                    # all of it, or only the oldest uncommitted batch (batches commit whole)
                    later = [end for end in writer.batch_ends if end > writer.high_watermark]
                    writer.commit(to=None if args[0] or not later else later[0])
                elif kind == "fail_next_append":
                    h.writer.fail_appends = 1
                else:
                    getattr(driver, kind)(*args)
                await h.settle()
                driver.check_reads()
                assert standby.state is LoadState.STANDBY
                driver.check_standby(standby.shard)
            h.writer.fail_appends = 0
            h.writer.commit()
            await h.settle()
            driver.check_reads()
            driver.check_equivalent()
            driver.check_standby(standby.shard)
            assert not h.shard._pending
            # Failover: the leader resigns, the standby's broker leads at the next epoch.
            written = len(h.writer.records)
            expected = driver.offsets(driver.replayed(written))
            h.shard.resigned(1)
            follower.partition_led(OFFSETS_TOPIC, 0, 1)
            assert standby.state is LoadState.ACTIVE  # no load
            assert len(h.writer.records) == written  # the standby wrote nothing, ever
            assert driver.offsets(standby.shard) == expected
            h.writer.auto_commit = True
            assert commit_code(await offset_commit(follower, 1001, "after-failover", 0)) == 0
        finally:
            await h.coordinator.stop()
            await follower.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


# -- the sequential model ------------------------------------------------------------------------
# The same requests, once pipelined behind writes in flight (the high watermark moves only when
# a step says so) and once one at a time (each committed before the next): the records written
# and the answers given must be the same. Every handler decides on the latest view, so what is
# in flight counts exactly as if it were committed.

MODEL_GROUPS = ("a", "b", "static")
model_steps = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(MODEL_GROUPS), st.integers(0, 1), st.integers(0, 1000)),
    st.tuples(st.just("rejoin"), st.sampled_from(MODEL_INSTANCES)),
    st.tuples(st.just("delete_group"), st.sampled_from(MODEL_GROUPS)),
    st.tuples(st.just("delete_offsets"), st.sampled_from(MODEL_GROUPS), st.integers(0, 1)),
    st.tuples(st.just("advance"), st.sampled_from([0, 10_000, 60_000])),
    st.tuples(st.just("commit_log"), st.booleans()),
), min_size=1, max_size=30)


async def _run_model(steps: list[tuple[Any, ...]], pipelined: bool) -> tuple[list[Any], list[Any]]:
    """(records written, answers given) for `steps`, pipelined or one at a time."""
    h = Harness({"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "100",
                 "group.min.session.timeout.ms": "1000", "offsets.retention.minutes": "1",
                 "offsets.retention.check.interval.ms": "10000", "offsets.commit.timeout.ms": "3600000"})
    try:
        await h.start()
        ids = itertools.count()  # member ids the same in both runs
        h.shard.shard.membership._new_member_id = lambda prefix: f"{prefix}-{next(ids)}"
        await stable_static_group(h, "static")
        h.writer.auto_commit = not pipelined
        tasks: list[asyncio.Future[Any]] = []
        for step in steps:
            kind, args = step[0], step[1:]
            if kind == "commit":
                group, partition, offset = args
                tasks.append(asyncio.ensure_future(offset_commit(h.coordinator, offset, group, partition)))
            elif kind == "rejoin":
                tasks.append(model_join(h, "static", args[0]))
            elif kind == "delete_group":
                tasks.append(model_delete_group(h, args[0]))
            elif kind == "delete_offsets":
                tasks.append(model_delete_offsets(h, args[0], [args[1]]))
            elif kind == "advance":
                h.clock.advance(args[0])
            elif kind == "commit_log" and pipelined:
                later = [end for end in h.writer.batch_ends if end > h.writer.high_watermark]
                h.writer.commit(to=None if args[0] or not later else later[0])
            await h.settle()
        h.writer.commit()
        h.writer.auto_commit = True
        await h.settle()
        # A request the protocol holds (a JoinGroup waiting for the join phase) stays held in both.
        return list(h.writer.records), [task.result() if task.done() else None for task in tasks]
    finally:
        await h.coordinator.stop()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=model_steps)
def test_writes_in_flight_give_the_records_of_one_request_at_a_time(steps):
    async def scenario() -> None:
        pipelined = await _run_model(steps, pipelined=True)
        one_at_a_time = await _run_model(steps, pipelined=False)
        assert [(decode_key(k), v) for k, v in pipelined[0]] == [(decode_key(k), v) for k, v in one_at_a_time[0]]
        assert pipelined[1] == one_at_a_time[1]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
