"""Over the wire to an in-process broker whose fsyncs the test holds: DeleteTopics, and the
produce and fetch requests that wait on a partition (acks=all, long poll) when it is deleted or
its records never become durable."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient
from tidemark.records.batch import build_batch

PRODUCE, FETCH, METADATA, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 3, 19, 20
BOUND_S = 30  # ends a hung test; every answer here is due at once, long before any request timeout


def _run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout=BOUND_S))


async def _create(client: AsyncRawClient, name: str) -> uuid.UUID:
    response = await client.request(CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 1,
        "replication_factor": 1, "assignments": [], "configs": []}], "timeout": 10000, "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.none
    return response.topics[0].topic_id


async def _delete(client: AsyncRawClient, *topics: tuple[str | None, uuid.UUID | None]) -> list:
    response = await client.request(DELETE_TOPICS, 6, {"topics": [{"name": n, "topic_id": i} for n, i in topics],
                                                       "timeout": 10000})
    return [(r.name, r.topic_id, r.error_code) for r in response.responses]


async def _topics(client: AsyncRawClient) -> set[str]:
    response = await client.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
    return {t.name for t in response.topics}


def _produce_body(topic: str, value: bytes, timeout_ms: int) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout": timeout_ms, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": build_batch([(None, value, (), 1)])}]}]}


def _fetch_body(topic: str, offset: int, max_wait_ms: int) -> dict:
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": 1 << 20}]}]}


def _partition(response):
    return response.responses[0].partitions[0] if hasattr(response.responses[0], "partitions") \
        else response.responses[0].partition_responses[0]


def test_delete_topics_by_name_and_id_and_unknown_ones(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            by_name, by_id = await _create(client, "by-name"), await _create(client, "by-id")
            missing_id = uuid.uuid4()
            assert await _delete(client, ("by-name", None), (None, by_id), ("nowhere", None), (None, missing_id)) == [
                ("by-name", by_name, ErrorCode.none),
                ("by-id", by_id, ErrorCode.none),  # v6: the answer names the topic deleted by id
                ("nowhere", None, ErrorCode.unknown_topic_or_partition),
                (None, missing_id, ErrorCode.unknown_topic_id),
            ]
            assert not {"by-name", "by-id"} & await _topics(client)
            assert not [p for p in tmp_path.iterdir() if p.name.startswith(("by-name-", "by-id-"))]
            await client.close()

    _run(scenario())


def test_delete_refused_when_delete_topic_enable_is_false(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, {"delete.topic.enable": "false"}) as broker:
            client = await AsyncRawClient.connect(broker.port)
            topic_id = await _create(client, "kept")
            assert await _delete(client, ("kept", None), (None, topic_id)) == [
                ("kept", topic_id, ErrorCode.topic_deletion_disabled),
                ("kept", topic_id, ErrorCode.topic_deletion_disabled)]
            assert "kept" in await _topics(client)
            produced = _partition(await client.request(PRODUCE, 9, _produce_body("kept", b"still here", 10000)))
            assert (produced.error_code, produced.base_offset) == (ErrorCode.none, 0)
            await client.close()

    _run(scenario())


def test_waiting_produce_and_fetch_are_answered_when_their_partition_is_deleted(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            admin, producer, fetcher = [await AsyncRawClient.connect(broker.port) for _ in range(3)]
            topic_id = await _create(admin, "doomed")
            partition = broker.replicas.partition("doomed", 0)
            broker.replicas.flusher.holding = True  # the acks=all produce cannot complete
            produce = await producer.send(PRODUCE, 9, _produce_body("doomed", b"unacknowledged", 60000))
            fetch = await fetcher.send(FETCH, 11, _fetch_body("doomed", 0, 60000))  # nothing durable to read
            await until(lambda: partition._hw_waiters and partition._advanced is not None)  # both waiting
            assert await _delete(admin, ("doomed", None)) == [("doomed", topic_id, ErrorCode.none)]
            # The produce's wait ends as Kafka's DelayedProduce does when its partition goes away.
            assert _partition(await producer.receive(PRODUCE, 9, produce)).error_code == \
                ErrorCode.not_leader_or_follower
            assert _partition(await fetcher.receive(FETCH, 11, fetch)).error_code == \
                ErrorCode.unknown_topic_or_partition
            for client in (admin, producer, fetcher):
                await client.close()

    _run(scenario())


def test_acks_all_times_out_while_unflushed_and_loses_nothing(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            producer, consumer = await AsyncRawClient.connect(broker.port), await AsyncRawClient.connect(broker.port)
            await _create(producer, "slow-disk")
            flusher = broker.replicas.flusher
            flusher.holding = True
            # The fsync is held, so no timeout is long enough: the answer is REQUEST_TIMED_OUT.
            timed_out = _partition(await producer.request(PRODUCE, 9, _produce_body("slow-disk", b"first", 50)))
            assert (timed_out.error_code, timed_out.base_offset) == (ErrorCode.request_timed_out, 0)
            fetch = await consumer.send(FETCH, 11, _fetch_body("slow-disk", 0, 60000))
            flusher.release()
            # Not durable is not lost: once fsynced the record is there, at the offset it was given.
            fetched = _partition(await consumer.receive(FETCH, 11, fetch))
            assert (fetched.error_code, fetched.high_watermark) == (ErrorCode.none, 1)
            assert b"first" in fetched.records
            acked = _partition(await producer.request(PRODUCE, 9, _produce_body("slow-disk", b"second", 60000)))
            assert (acked.error_code, acked.base_offset) == (ErrorCode.none, 1)
            for client in (producer, consumer):
                await client.close()

    _run(scenario())
