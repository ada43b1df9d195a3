"""The group coordinator's lifecycle and Kafka's classic-group semantics over the wire."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
import time

from kio.schema.errors import ErrorCode

from tests.coordinator.conftest import ManualClock
from tests.integration.raw import RawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker

FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, SYNC_GROUP, DELETE_TOPICS = (
    10, 8, 9, 11, 12, 14, 20)
METADATA, OFFSET_DELETE = 3, 47


def _commit(client, group, offset, generation=-1, member=""):
    response = client.request(OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
        "group_instance_id": None, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return response.topics[0].partitions[0].error_code


def _fetch(client, group):
    response = client.request(OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": [{"name": "orders", "partition_indexes": [0]}]}], "require_stable": False})
    (fetched,) = response.groups
    offsets = [p.committed_offset for t in fetched.topics for p in t.partitions]
    return fetched.error_code, offsets


def _until_loaded(client, group):
    """FindCoordinator (creates the offsets topic), then wait for the group's partition to load."""
    client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [group]})
    deadline = time.monotonic() + 30
    while (fetched := _fetch(client, group))[0] == ErrorCode.coordinator_load_in_progress:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return fetched


def _join_alone(client, group, session_ms):
    """A one-member consumer group, Stable at generation 1; returns the member id."""
    body = {"group_id": group, "session_timeout": session_ms, "rebalance_timeout": session_ms, "member_id": "",
            "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]}
    member = client.request(JOIN_GROUP, 5, body).member_id  # MEMBER_ID_REQUIRED
    joined = client.request(JOIN_GROUP, 5, {**body, "member_id": member})
    assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)
    synced = client.request(SYNC_GROUP, 3, {"group_id": group, "generation_id": 1, "member_id": member,
                                            "group_instance_id": None,
                                            "assignments": [{"member_id": member, "assignment": b""}]})
    assert synced.error_code == ErrorCode.none
    return member


def _heartbeat(client, group, member):
    return client.request(HEARTBEAT, 4, {"group_id": group, "generation_id": 1, "member_id": member,
                                         "group_instance_id": None}).error_code


def test_commits_keep_a_members_session_alive(tmp_path):
    """Kafka reschedules a classic member's heartbeat deadline on each accepted OffsetCommit.
    The broker runs in-process on a manual clock, so the session runs out only when the test
    moves time: the client talks to it over a real socket."""
    session_ms = 6000
    clock = ManualClock()
    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
    with running_broker(Broker(config, tmp_path, port=0, clock=clock)) as (broker, advance):
        with RawClient(f"127.0.0.1:{broker.port}") as client:
            client.create_topic("orders")
            _until_loaded(client, "committer")
            member = _join_alone(client, "committer", session_ms)
            # Two commits 4 s apart, never a heartbeat: 8 s after the join, past the 6 s session.
            for offset in (1, 2):
                advance(4000)
                assert _commit(client, "committer", offset, generation=1, member=member) == ErrorCode.none
            advance(4000)  # 12 s after the join, 4 s after the last commit
            assert _heartbeat(client, "committer", member) == ErrorCode.none
            advance(session_ms)  # and without commits or heartbeats the session does end
            assert _heartbeat(client, "committer", member) == ErrorCode.unknown_member_id


def test_offset_delete_takes_a_live_group_with_unreadable_subscriptions_as_subscribed(tmp_path):
    """Kafka's isSubscribedToTopic: a consumer group whose members' subscriptions do not parse
    (here empty metadata) is taken as subscribed to every topic while it has members, so
    OffsetDelete leaves its offsets (GROUP_SUBSCRIBED_TO_TOPIC). The clock is manual: the member
    stays in the group for as long as the test runs."""
    clock = ManualClock()
    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
    with running_broker(Broker(config, tmp_path, port=0, clock=clock)) as (broker, _):
        with RawClient(f"127.0.0.1:{broker.port}") as client:
            client.create_topic("orders")
            _until_loaded(client, "opaque")
            member = _join_alone(client, "opaque", 30_000)
            assert _commit(client, "opaque", 7, generation=1, member=member) == ErrorCode.none
            deleted = client.request(OFFSET_DELETE, 0, {"group_id": "opaque", "topics": [
                {"name": "orders", "partitions": [{"partition_index": 0}]}]})
            assert (deleted.error_code, [(t.name, p.partition_index, p.error_code) for t in deleted.topics
                                         for p in t.partitions]) == (
                ErrorCode.none, [("orders", 0, ErrorCode.group_subscribed_to_topic)])
            assert _fetch(client, "opaque") == (ErrorCode.none, [7])


def _subscription(*topics: str) -> bytes:
    """A ConsumerProtocolSubscription v0 naming `topics`."""
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def test_explicit_retention_does_not_expire_a_stable_groups_subscribed_offsets(tmp_path):
    """KIP-211 as Kafka applies it: an OffsetCommit v2 retention_time is an expire timestamp
    that counts only where the group's expiration condition lets the offset expire at all; a
    Stable group still subscribed to the topic keeps it past that time."""
    clock = ManualClock()
    config = BrokerConfig({"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1",
                           "offsets.retention.check.interval.ms": "1000"})
    with running_broker(Broker(config, tmp_path, port=0, clock=clock)) as (broker, advance):
        with RawClient(f"127.0.0.1:{broker.port}") as client:
            client.create_topic("orders")
            _until_loaded(client, "steady")
            body = {"group_id": "steady", "session_timeout": 600_000, "rebalance_timeout": 600_000,
                    "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": _subscription("orders")}]}
            member = client.request(JOIN_GROUP, 5, body).member_id  # MEMBER_ID_REQUIRED
            assert client.request(JOIN_GROUP, 5, {**body, "member_id": member}).generation_id == 1
            assert client.request(SYNC_GROUP, 3, {"group_id": "steady", "generation_id": 1, "member_id": member,
                                                  "group_instance_id": None, "assignments": [
                                                      {"member_id": member, "assignment": b""}]}).error_code == 0
            committed = client.request(OFFSET_COMMIT, 2, {
                "group_id": "steady", "generation_id_or_member_epoch": 1, "member_id": member,
                "retention_time": 60_000, "topics": [{"name": "orders", "partitions": [
                    {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}]})
            assert committed.topics[0].partitions[0].error_code == ErrorCode.none
            advance(120_000)  # two minutes: twice the explicit retention, many retention checks
            assert _heartbeat(client, "steady", member) == ErrorCode.none  # still Stable, still a member
            assert _fetch(client, "steady") == (ErrorCode.none, [5])


@contextlib.contextmanager
def running_broker(broker: Broker):
    """Run `broker` on an event loop in a thread; yields it and `advance(ms)`, which moves its
    manual clock on that loop and returns once the due timers ran."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(fn):
        async def call():
            return fn()
        return asyncio.run_coroutine_threadsafe(call(), loop).result(timeout=60)

    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(timeout=60)
    try:
        yield broker, lambda ms: on_loop(lambda: broker.clock.advance(ms))
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(timeout=60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=60)
        loop.close()


def test_deleting_the_offsets_topic_unloads_its_groups(make_broker):
    broker = make_broker().start()
    with RawClient(broker.bootstrap) as client:
        client.create_topic("orders")
        _until_loaded(client, "deleted")
        assert _commit(client, "deleted", 41) == ErrorCode.none
        assert _fetch(client, "deleted") == (ErrorCode.none, [41])
        deleted = client.request(DELETE_TOPICS, 6, {"topics": [{"name": "__consumer_offsets", "topic_id": None}],
                                                    "timeout": 10000})
        assert deleted.responses[0].error_code == ErrorCode.none
        # Both get NOT_COORDINATOR: the cache went with the topic.
        assert _fetch(client, "deleted") == (ErrorCode.not_coordinator, [])
        assert _commit(client, "deleted", 42) == ErrorCode.not_coordinator
        # FindCoordinator creates the topic again; its partitions load afresh, empty.
        assert _until_loaded(client, "deleted") == (ErrorCode.none, [-1])
    broker.stop()


def test_metadata_for_the_offsets_topic_creates_it(make_broker):
    """Kafka creates __consumer_offsets (its own partition count, compacted, internal) when a
    Metadata request names it, even with auto-creation off: lag monitors such as Burrow ask for its
    partition count before anything else."""
    broker = make_broker({"auto.create.topics.enable": "false", "offsets.topic.num.partitions": "7"}).start()
    with RawClient(broker.bootstrap) as client:
        for allow in (False, True):
            response = client.request(METADATA, 12, {"topics": [{"name": "__consumer_offsets", "topic_id": None}],
                                                     "allow_auto_topic_creation": allow,
                                                     "include_topic_authorized_operations": False})
            (topic,) = response.topics
            assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (ErrorCode.none, True, 7)
        # It is the coordinator's topic: the groups in it load and serve.
        assert _until_loaded(client, "after-metadata") == (ErrorCode.none, [-1])
        # Other unknown topics still follow auto.create.topics.enable.
        response = client.request(METADATA, 12, {"topics": [{"name": "not-there", "topic_id": None}],
                                                 "allow_auto_topic_creation": True,
                                                 "include_topic_authorized_operations": False})
        assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    broker.stop()
