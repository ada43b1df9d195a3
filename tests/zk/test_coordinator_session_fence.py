"""A group coordinator answers nothing from its cache once its broker may no longer lead: while
its ZooKeeper session is suspended, or after its lease lapsed unseen (a pause), OffsetFetch and
OffsetCommit answer NOT_COORDINATOR; once the lease is held again and ZooKeeper still names it
the offsets partition's leader, the shard is loaded afresh from the log, so it answers what
the log holds (here a commit written while it was fenced), not what its cache held.

The broker runs in the test's event loop on a real ZooKeeper; the test drives the session's
state as kazoo's listener would, and its lease clock, so nothing depends on timing. The last
test does it with broker processes, SIGSTOP and a real session expiry."""

from __future__ import annotations

import asyncio
import time

from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooState
from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient, RawClient
from tests.zk import offsets_cluster
from tests.zk.test_cluster_brokers import _cluster
from tidemark.coordinator.runtime.runtime import LoadState
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OFFSETS_TOPIC, OffsetCommitKey, OffsetCommitValue, encode_key, \
    encode_offset_commit_value

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
GROUP, TOPIC = "fenced", "orders"
HANG_GUARD_S = 60


def _settings(chroot: str) -> dict[str, str]:
    return {"zookeeper.connect": chroot, "broker.id": "1", "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1", "zookeeper.session.timeout.ms": "6000"}


async def _commit(client: AsyncRawClient, offset: int) -> ErrorCode:
    response = await client.request(OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return response.topics[0].partitions[0].error_code


async def _fetch(client: AsyncRawClient) -> tuple[ErrorCode, int]:
    response = await client.request(OFFSET_FETCH, 8, {"groups": [
        {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}], "require_stable": False})
    group = response.groups[0]
    if group.error_code != ErrorCode.none:
        return group.error_code, -1
    answered = group.topics[0].partitions[0]
    return answered.error_code, answered.committed_offset


def _active(broker) -> bool:
    shards = broker.coordinator.shards
    return bool(shards) and all(s.state is LoadState.ACTIVE for s in shards.values())


async def _serving(broker) -> AsyncRawClient:
    await broker.cluster.create_topic(TOPIC, 1, 1, {})
    client = await AsyncRawClient.connect(broker.port)
    await client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]})  # creates the topic
    await until(lambda: _active(broker))
    assert await _commit(client, 5) == ErrorCode.none
    assert await _fetch(client) == (ErrorCode.none, 5)
    return client


def _commit_in_log(broker, offset: int) -> None:
    """A commit the log holds that this coordinator never handled (as one a later leader
    acknowledged, which this replica fetched)."""
    value = OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=1, expire_timestamp=-1)
    record = (encode_key(OffsetCommitKey(GROUP, TOPIC, 0)), encode_offset_commit_value(value), (), int(time.time() * 1000))
    partition = broker.replicas.partition(OFFSETS_TOPIC, 0)
    broker.replicas.append(partition, build_batch([record]))


def test_a_suspended_session_fences_the_coordinator_until_it_reloads(tmp_path, zookeeper, chroot):
    async def scenario() -> None:
        async with running_broker(tmp_path, _settings(chroot)) as broker:
            client = await _serving(broker)
            session = broker.zookeeper
            session._state_changed(KazooState.SUSPENDED)  # as kazoo's connection thread tells it
            # At once, before the event loop hears of it: no answer from the cache.
            assert await _fetch(client) == (ErrorCode.not_coordinator, -1)
            assert await _commit(client, 6) == ErrorCode.not_coordinator
            await until(lambda: broker.coordinator.shards[0].state is LoadState.UNLOADED)
            _commit_in_log(broker, 9)
            assert await _fetch(client) == (ErrorCode.not_coordinator, -1)

            session._state_changed(KazooState.CONNECTED)  # the same session: it never expired
            await until(lambda: broker.cluster.coordinator_fence.releads == 1 and _active(broker))
            await until(lambda: broker.replicas.partition(OFFSETS_TOPIC, 0).high_watermark
                        == broker.replicas.partition(OFFSETS_TOPIC, 0).log.log_end_offset)
            assert await _fetch(client) == (ErrorCode.none, 9)  # loaded from the log, not the cache
            assert await _commit(client, 10) == ErrorCode.none
            assert await _fetch(client) == (ErrorCode.none, 10)
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD_S))


def test_a_lease_lapsed_unseen_by_kazoo_fences_the_coordinator_until_it_reloads(tmp_path, zookeeper, chroot):
    """A broker paused past its lease (SIGSTOP): kazoo has not noticed anything yet when the
    event loop answers the requests that waited, yet none is answered from the cache."""
    async def scenario() -> None:
        async with running_broker(tmp_path, _settings(chroot)) as broker:
            client = await _serving(broker)
            session = broker.zookeeper
            paused_s = session.session_timeout_s  # the lease's clock jumps as over a pause
            session.monotonic = lambda: time.monotonic() + paused_s
            assert await _fetch(client) == (ErrorCode.not_coordinator, -1)
            assert await _commit(client, 6) == ErrorCode.not_coordinator
            _commit_in_log(broker, 9)
            # The next round trip proves the session alive: the shard reloads before serving.
            await until(lambda: broker.cluster.coordinator_fence.releads == 1 and _active(broker))
            await until(lambda: broker.replicas.partition(OFFSETS_TOPIC, 0).high_watermark
                        == broker.replicas.partition(OFFSETS_TOPIC, 0).log.log_end_offset)
            assert await _fetch(client) == (ErrorCode.none, 9)
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD_S))


def _commit_body(offset: int) -> dict:
    return {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


FETCH_BODY = {"groups": [{"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
              "require_stable": False}


def _fetched(response) -> tuple[ErrorCode, int]:
    group = response.groups[0]
    if group.error_code != ErrorCode.none:
        return ErrorCode(group.error_code), -1
    answered = group.topics[0].partitions[0]
    return ErrorCode(answered.error_code), answered.committed_offset


def test_a_coordinator_paused_past_its_session_answers_no_offset_fetch_from_its_cache(make_broker, chroot, zk):
    """Broker processes: the coordinator is SIGSTOPped past its session, another broker takes the
    offsets partition and acknowledges a commit; an OffsetFetch sent to the paused broker is
    answered when it resumes, before it can have learnt anything from ZooKeeper: never with the
    offset its cache holds."""
    brokers = _cluster(make_broker, chroot, **{"offsets.topic.num.partitions": "1"})
    admin = AdminClient({"bootstrap.servers": offsets_cluster.bootstrap(brokers)})
    admin.create_topics([NewTopic(TOPIC, 1, 3)])[TOPIC].result(offsets_cluster.WAIT_S)
    old = offsets_cluster.coordinator_of(brokers[1].bootstrap, GROUP)
    offsets_cluster.until(lambda: len(offsets_cluster.zk_state(zk, chroot, OFFSETS_TOPIC, 0)["isr"]) == 3,
                          "every offsets replica in sync")
    with RawClient(brokers[old].bootstrap) as stale:
        offsets_cluster.until(lambda: _code(stale.request(OFFSET_COMMIT, 8, _commit_body(5))) == ErrorCode.none,
                              "the first commit acknowledged")
        assert _fetched(stale.request(OFFSET_FETCH, 8, FETCH_BODY)) == (ErrorCode.none, 5)

        brokers[old].pause()
        try:
            new = offsets_cluster.until(
                lambda: (leader := offsets_cluster.zk_state(zk, chroot, OFFSETS_TOPIC, 0)["leader"]) not in (old, -1)
                and leader, "another broker leads the offsets partition")
            with RawClient(brokers[new].bootstrap) as current:
                offsets_cluster.until(
                    lambda: _code(current.request(OFFSET_COMMIT, 8, _commit_body(9))) == ErrorCode.none,
                    "a commit acknowledged by the new coordinator")
            stale.send_frame(stale.encode(OFFSET_FETCH, 8, FETCH_BODY))  # waits in the paused broker's socket
        finally:
            brokers[old].resume()
        answered = _fetched(stale.read_response(OFFSET_FETCH, 8))
    assert answered == (ErrorCode.none, 9) or answered[0] in (
        ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress), answered
    assert answered != (ErrorCode.none, 5)
    # Once it has learnt it follows, the group's coordinator (whichever) answers the new commit.
    offsets_cluster.until(lambda: _fetched(offsets_cluster.offset_fetch(
        brokers[offsets_cluster.coordinator_of(brokers[old].bootstrap, GROUP)].bootstrap, GROUP, TOPIC, [0]))
        == (ErrorCode.none, 9), "the acknowledged commit fetched")


def _code(response) -> ErrorCode:
    return ErrorCode(response.topics[0].partitions[0].error_code)
