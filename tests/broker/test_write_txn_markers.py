"""Transactions over the wire, on an in-process broker: a transactional produce, the
WriteTxnMarkers a transaction coordinator sends, read_committed Fetch and ListOffsets, and
TxnOffsetCommit's offsets pending until the marker lands in the offsets partition (also across
a restart)."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient, fetch_body
from tidemark.records import build_batch, iter_batches
from tidemark.records.control import read_marker
from tidemark.records.offsets_schema import OFFSETS_TOPIC

SETTINGS = {"offsets.topic.num.partitions": "1"}
PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FETCH, INIT_PRODUCER_ID = 0, 1, 2, 9, 22
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT = 27, 28
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
NOW = 1_700_000_000_000


async def _producer_id(client: AsyncRawClient) -> int:
    response = await client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                          "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == ErrorCode.none
    return int(response.producer_id)


async def _produce(client: AsyncRawClient, records: bytes, transactional_id: str | None = "tx") -> tuple[int, int]:
    response = await client.request(PRODUCE, 9, {"transactional_id": transactional_id, "acks": -1, "timeout": 30000,
                                                 "topic_data": [{"name": "t", "partition_data": [
                                                     {"index": 0, "records": records}]}]})
    answer = response.responses[0].partition_responses[0]
    return answer.error_code, answer.base_offset


def _txn_batch(pid: int, seq: int, *values: bytes, epoch: int = 0) -> bytes:
    return build_batch([(None, v, (), NOW) for v in values], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, is_transactional=True)


async def _markers(client: AsyncRawClient, pid: int, epoch: int, commit: bool, topic: str = "t",
                   partitions: tuple[int, ...] = (0,), coordinator_epoch: int = 0) -> list[ErrorCode]:
    response = await client.request(WRITE_TXN_MARKERS, 1, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": list(partitions)}]}]})
    (marker,) = response.markers
    assert marker.producer_id == pid
    return [p.error_code for t in marker.topics for p in t.partitions]


async def _fetch(client: AsyncRawClient, offset: int, isolation: int) -> object:
    body = {**fetch_body([("t", 0, offset, 1 << 20)]), "isolation_level": isolation}
    response = await client.request(FETCH, 11, body)
    return response.responses[0].partitions[0]


async def _latest(client: AsyncRawClient, isolation: int) -> int:
    response = await client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    answer = response.topics[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    return answer.offset


def _batches(records: bytes) -> list[tuple[int, int, bool]]:
    """(base offset, producer id, is control) of each batch."""
    return [(h.base_offset, h.producer_id, h.is_control) for _, h in iter_batches(records)] if records else []


def test_markers_decide_what_read_committed_consumers_see(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {})
            client = await AsyncRawClient.connect(broker.port)
            aborting, committing = await _producer_id(client), await _producer_id(client)
            assert await _produce(client, _txn_batch(aborting, 0, b"a0", b"a1")) == (ErrorCode.none, 0)
            assert await _produce(client, build_batch([(None, b"plain", (), NOW)]), None) == (ErrorCode.none, 2)
            assert await _produce(client, _txn_batch(committing, 0, b"c0")) == (ErrorCode.none, 3)

            # Both transactions open: read_committed stops at the first one's first offset.
            uncommitted = await _fetch(client, 0, READ_UNCOMMITTED)
            assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (4, 0)
            committed = await _fetch(client, 0, READ_COMMITTED)
            assert (committed.high_watermark, committed.last_stable_offset, committed.records) == (4, 0, b"")
            assert await _latest(client, READ_COMMITTED) == 0
            assert await _latest(client, READ_UNCOMMITTED) == 4

            assert await _markers(client, aborting, 0, False) == [ErrorCode.none]  # offset 4
            answer = await _fetch(client, 0, READ_COMMITTED)
            assert answer.last_stable_offset == 3  # the committing transaction is still open
            assert _batches(answer.records) == [(0, aborting, False), (2, -1, False)]
            assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(aborting, 0)]

            assert await _markers(client, committing, 0, True) == [ErrorCode.none]  # offset 5
            assert await _latest(client, READ_COMMITTED) == 6
            answer = await _fetch(client, 0, READ_COMMITTED)
            assert answer.last_stable_offset == answer.high_watermark == 6
            assert _batches(answer.records) == [(0, aborting, False), (2, -1, False), (3, committing, False),
                                                (4, aborting, True), (5, committing, True)]
            records = bytes(answer.records)
            positions = [pos for pos, _ in iter_batches(records)]
            assert read_marker(records, positions[3]) == (False, 0)
            assert read_marker(records, positions[4]) == (True, 0)
            assert [(t.producer_id, t.first_offset) for t in answer.aborted_transactions] == [(aborting, 0)]
            # A fetch past the aborted transaction is told nothing about it.
            assert list((await _fetch(client, 5, READ_COMMITTED)).aborted_transactions) == []
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_marker_errors(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {})
            client = await AsyncRawClient.connect(broker.port)
            pid = await _producer_id(client)
            assert await _produce(client, _txn_batch(pid, 0, b"x", epoch=3)) == (ErrorCode.none, 0)
            assert await _markers(client, pid, 2, True) == [ErrorCode.invalid_producer_epoch]
            assert await _markers(client, pid, 3, True, coordinator_epoch=5) == [ErrorCode.none]
            assert await _markers(client, pid, 3, False, coordinator_epoch=4) == [ErrorCode.transaction_coordinator_fenced]
            assert await _markers(client, pid, 3, True, partitions=(0, 7), coordinator_epoch=5) == [
                ErrorCode.none, ErrorCode.unknown_topic_or_partition]
            assert await _markers(client, pid, 3, True, topic="nope") == [ErrorCode.unknown_topic_or_partition]
            # A non-transactional write while a transaction is open on the partition is refused.
            assert await _produce(client, _txn_batch(pid, 1, b"y", epoch=3)) == (ErrorCode.none, 3)
            plain = build_batch([(None, b"z", (), NOW)], producer_id=pid, producer_epoch=3, base_sequence=2)
            assert (await _produce(client, plain, None))[0] == ErrorCode.invalid_txn_state
            # A transactional batch without a producer id is no transaction.
            assert (await _produce(client, build_batch([(None, b"q", (), NOW)], is_transactional=True)))[0] \
                == ErrorCode.invalid_record
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_markers_are_written_with_acks_all_min_insync_replicas(tmp_path):
    """Kafka appends markers with acks=-1: with fewer in-sync replicas than min.insync.replicas
    the marker is refused NOT_ENOUGH_REPLICAS and nothing is written (the transaction coordinator
    retries it), rather than acknowledged from the leader alone."""
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {"min.insync.replicas": "2"})
            client = await AsyncRawClient.connect(broker.port)
            pid = await _producer_id(client)
            assert await _markers(client, pid, 0, True) == [ErrorCode.not_enough_replicas]
            assert broker.replicas.partition("t", 0).log.log_end_offset == 0
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


async def _txn_commit(client: AsyncRawClient, pid: int, offset: int, *, epoch: int = 0, version: int = 3,
                      generation: int = -1, member_id: str = "") -> ErrorCode:
    body = {"transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": epoch,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
    if version >= 3:
        body.update(generation_id=generation, member_id=member_id, group_instance_id=None)
    response = await client.request(TXN_OFFSET_COMMIT, version, body)
    return response.topics[0].partitions[0].error_code


async def _offset_fetch(client: AsyncRawClient, require_stable: bool) -> tuple[int, ErrorCode]:
    response = await client.request(OFFSET_FETCH, 7, {"group_id": "g", "require_stable": require_stable,
                                                      "topics": [{"name": "t", "partition_indexes": [0]}]})
    answer = response.topics[0].partitions[0]
    return answer.committed_offset, answer.error_code


async def _serving(broker) -> AsyncRawClient:
    broker.coordinator.ensure_offsets_topic()
    await until(lambda: all(s.state.value == "active" for s in broker.coordinator.shards.values()))
    return await AsyncRawClient.connect(broker.port)


def test_transactional_offsets_wait_for_the_commit_marker_and_survive_a_restart(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {})
            client = await _serving(broker)
            pid = await _producer_id(client)
            assert await _txn_commit(client, pid, 10) == ErrorCode.none
            assert await _offset_fetch(client, False) == (-1, ErrorCode.none)
            assert await _offset_fetch(client, True) == (-1, ErrorCode.unstable_offset_commit)
            offsets_log = broker.replicas.partition(OFFSETS_TOPIC, 0).log
            assert offsets_log.producer_state.ongoing_txns  # the offsets partition's LSO waits too
            await client.close()
        # The transaction is still open after the restart: its offset still pending.
        async with running_broker(tmp_path, SETTINGS) as broker:
            client = await _serving(broker)
            assert await _offset_fetch(client, True) == (-1, ErrorCode.unstable_offset_commit)
            assert await _markers(client, pid, 0, True, topic=OFFSETS_TOPIC) == [ErrorCode.none]
            assert await _offset_fetch(client, True) == (10, ErrorCode.none)
            # An aborted transaction's offset is dropped; the committed one stays.
            assert await _txn_commit(client, pid, 20, version=0) == ErrorCode.none
            assert await _markers(client, pid, 0, False, topic=OFFSETS_TOPIC) == [ErrorCode.none]
            assert await _offset_fetch(client, True) == (10, ErrorCode.none)
            await client.close()
        # Loading replays the markers as they were written.
        async with running_broker(tmp_path, SETTINGS) as broker:
            client = await _serving(broker)
            assert await _offset_fetch(client, True) == (10, ErrorCode.none)
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_txn_offset_commit_checks_the_group_generation_and_member(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, SETTINGS) as broker:
            broker.replicas.create_topic("t", 1, {})
            client = await _serving(broker)
            pid = await _producer_id(client)
            # No group yet: a generation names a group that is not there.
            assert await _txn_commit(client, pid, 1, generation=1, member_id="m") == ErrorCode.illegal_generation
            assert await _txn_commit(client, pid, 1) == ErrorCode.none
            assert await _markers(client, pid, 0, True, topic=OFFSETS_TOPIC) == [ErrorCode.none]
            # The group exists now (Empty): a member it does not have is unknown.
            assert await _txn_commit(client, pid, 2, generation=1, member_id="m") == ErrorCode.unknown_member_id
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
