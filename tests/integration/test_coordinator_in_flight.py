"""Real clients against a coordinator with writes in flight: each request is decided on the
latest view (everything appended, committed or not), so it does what it would do one request at
a time.

The broker runs in the test's event loop with a held flusher (tests/broker/inprocess.py): while
it holds, nothing appended to the offsets topic commits, and the test waits until the coordinator
has the expected writes pending before it releases them, so the in-flight window is certain.
The clients (confluent-kafka, blocking) run in threads.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient
from tidemark.coordinator.group_coordinator import GroupCoordinator

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from tidemark.wire.api_keys import ApiKey

SETTINGS = {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}
TOPIC = "orders"
BOUND_S = 120.0  # a hang guard for each test, not a margin
OFFSET_COMMIT, OFFSET_FETCH, DELETE_GROUPS, LIST_GROUPS, OFFSET_DELETE = 8, 9, 42, 16, 47


def _pending(coordinator: GroupCoordinator) -> int:
    """Writes appended by the coordinator and not yet committed, over every offsets partition."""
    return sum(len(runtime._pending) for runtime in coordinator.shards.values())


def _run(tmp_path: Path, scenario) -> None:
    async def main() -> None:
        async with running_broker(tmp_path / "data", SETTINGS) as broker:
            if broker.replicas.topic(TOPIC) is None:
                broker.replicas.create_topic(TOPIC, 4, {})
            await scenario(broker)

    asyncio.run(asyncio.wait_for(main(), timeout=BOUND_S))


async def _in_thread(function, *args: Any) -> Any:
    """Run a blocking client call in its own thread while the broker serves on this loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def run() -> None:
        try:
            result = function(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting coroutine
            loop.call_soon_threadsafe(done.set_exception, exc)
        else:
            loop.call_soon_threadsafe(done.set_result, result)

    threading.Thread(target=run, daemon=True).start()
    return await done


class StaticConsumer:
    """A confluent-kafka static member polled in its own thread until closed."""

    def __init__(self, bootstrap: str, group: str, instance: str) -> None:
        self.errors: list[Any] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
            "session.timeout.ms": 30_000, "enable.auto.commit": False, "log_level": 0,
            "error_cb": self.errors.append})
        self.consumer.subscribe([TOPIC])
        self.assigned = threading.Event()
        self.member_id: str | None = None  # the member id it was assigned under
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            message = self.consumer.poll(0.05)
            if message is not None and message.error() is not None:
                self.errors.append(message.error())
            if not self.assigned.is_set() and self.consumer.assignment():
                self.member_id = self.consumer.memberid()
                self.assigned.set()
            if self.fatal():
                self.assigned.set()  # fenced: it will never be assigned; the test looks at why

    def fatal(self) -> list[Any]:
        return [e for e in self.errors if getattr(e, "fatal", lambda: False)()
                or e.code() == confluent_kafka.KafkaError._FENCED]

    def close(self) -> None:
        """Stop polling and close: a static member sends no LeaveGroup."""
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def test_static_consumers_restarted_together_are_never_fenced(tmp_path):
    """Four static consumers closed and recreated at once, three times: every rejoin is handled
    while the other replacements are in flight, and none of the new consumers is fenced."""
    async def scenario(broker) -> None:
        bootstrap, group = f"127.0.0.1:{broker.port}", "static"
        instances = [f"i{n}" for n in range(4)]
        consumers = [StaticConsumer(bootstrap, group, i) for i in instances]
        for consumer in consumers:
            await _in_thread(consumer.assigned.wait)
        shard = broker.coordinator.shard_for(group).shard
        for _trial in range(3):
            old = set(shard.groups[group].static_members.values())
            await _in_thread(lambda: [c.close() for c in consumers])
            broker.replicas.flusher.holding = True
            consumers = [StaticConsumer(bootstrap, group, i) for i in instances]
            await until(lambda: _pending(broker.coordinator) == len(instances))  # four replacements
            broker.replicas.flusher.release()
            await until(lambda: _pending(broker.coordinator) == 0)
            # Every instance runs under its new incarnation's id: none went back to an old one.
            assert set(shard.groups[group].static_members.values()).isdisjoint(old)
            for consumer in consumers:
                await _in_thread(consumer.assigned.wait)
            assert [c.fatal() for c in consumers] == [[]] * len(instances)
            assert shard.groups[group].static_members == {
                i: c.member_id for i, c in zip(instances, consumers, strict=True)}
        await _in_thread(lambda: [c.close() for c in consumers])

    _run(tmp_path, scenario)


def _commit_in_thread(consumer: Consumer, partition: int, offset: int):
    return _in_thread(lambda: consumer.commit(offsets=[TopicPartition(TOPIC, partition, offset)],
                                              asynchronous=False))


def _committed(bootstrap: str, group: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=30)]
    finally:
        consumer.close()


GROUPS = [f"deleted-{n}" for n in range(20)]


async def _commit_offset_3_then_hold_offset_5(broker, group: str):
    """A consumer of `group` that committed offset 3 of partition 0, and its commit of offset 5
    of partition 1 appended but held in flight (the flusher holds): (consumer, that commit)."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": group, "log_level": 0,
                         "enable.auto.commit": False})
    await _commit_in_thread(consumer, 0, 3)
    broker.replicas.flusher.holding = True
    commit = asyncio.ensure_future(_commit_in_thread(consumer, 1, 5))
    await until(lambda: _pending(broker.coordinator) == 1)
    return consumer, commit


def test_delete_groups_after_a_commit_in_flight_leaves_no_offset(tmp_path):
    """In 20 groups: an offset committed, then a commit in flight and DeleteGroups behind it, both
    answered NONE; the group and both offsets are gone, also after a restart."""
    async def first_run(broker) -> None:
        bootstrap = f"127.0.0.1:{broker.port}"
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        for group in GROUPS:
            consumer, commit = await _commit_offset_3_then_hold_offset_5(broker, group)
            deleted = admin.delete_consumer_groups([group], request_timeout=30)[group]
            await until(lambda: _pending(broker.coordinator) == 2)
            broker.replicas.flusher.release()
            committed = await commit
            assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(1, 5, None)]
            assert await _in_thread(deleted.result, 30) is None  # NONE
            consumer.close()
        assert [await _in_thread(_committed, bootstrap, g) for g in GROUPS] == [[-1001, -1001]] * len(GROUPS)
        listed = await _in_thread(lambda: admin.list_consumer_groups(request_timeout=30).result(30))
        assert not {g.group_id for g in listed.valid} & set(GROUPS)

    async def after_restart(broker) -> None:
        bootstrap = f"127.0.0.1:{broker.port}"
        await until(lambda: all(s.state.value == "active" for s in broker.coordinator.shards.values()))
        assert [await _in_thread(_committed, bootstrap, g) for g in GROUPS] == [[-1001, -1001]] * len(GROUPS)
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        again = admin.delete_consumer_groups(GROUPS[:1], request_timeout=30)[GROUPS[0]]
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            await _in_thread(again.result, 30)
        assert raised.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND

    _run(tmp_path, first_run)
    _run(tmp_path, after_restart)


def test_offset_delete_after_a_commit_in_flight_leaves_no_offset(tmp_path):
    """In 20 groups: a commit in flight and OffsetDelete of its partition behind it (raw: this
    confluent-kafka has no OffsetDelete): the offset is gone, also after a restart."""
    async def first_run(broker) -> None:
        bootstrap = f"127.0.0.1:{broker.port}"
        admin = await AsyncRawClient.connect(broker.port)
        for group in GROUPS:
            consumer, commit = await _commit_offset_3_then_hold_offset_5(broker, group)
            deleted = await admin.send(OFFSET_DELETE, 0, {"group_id": group, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 1}]}]})
            await until(lambda: _pending(broker.coordinator) == 2)
            broker.replicas.flusher.release()
            await commit
            answer = await admin.receive(OFFSET_DELETE, 0, deleted)
            assert answer.error_code == ErrorCode.none
            assert [(p.partition_index, p.error_code) for p in answer.topics[0].partitions] == [(1, ErrorCode.none)]
            consumer.close()
        await admin.close()
        assert [await _in_thread(_committed, bootstrap, g) for g in GROUPS] == [[3, -1001]] * len(GROUPS)

    async def after_restart(broker) -> None:
        bootstrap = f"127.0.0.1:{broker.port}"
        await until(lambda: all(s.state.value == "active" for s in broker.coordinator.shards.values()))
        assert [await _in_thread(_committed, bootstrap, g) for g in GROUPS] == [[3, -1001]] * len(GROUPS)

    _run(tmp_path, first_run)
    _run(tmp_path, after_restart)


def test_pipelined_commit_and_delete_groups_on_one_connection(tmp_path):
    """The same over one connection: OffsetCommit and DeleteGroups sent back to back."""
    async def scenario(broker) -> None:
        client = await AsyncRawClient.connect(broker.port)
        try:
            await client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})
            await until(lambda: all(s.state.value == "active" for s in broker.coordinator.shards.values()))
            broker.replicas.flusher.holding = True
            commit = await client.send(OFFSET_COMMIT, 8, {
                "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                           "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
            delete = await client.send(DELETE_GROUPS, 2, {"groups_names": ["g"]})
            await until(lambda: _pending(broker.coordinator) == 2)
            broker.replicas.flusher.release()
            committed = await client.receive(OFFSET_COMMIT, 8, commit)
            assert committed.topics[0].partitions[0].error_code == ErrorCode.none
            assert (await client.receive(DELETE_GROUPS, 2, delete)).results[0].error_code == ErrorCode.none
            fetched = await client.request(OFFSET_FETCH, 8, {"groups": [
                {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}]}], "require_stable": True})
            assert fetched.groups[0].topics[0].partitions[0].committed_offset == -1
            listed = await client.request(LIST_GROUPS, 4, {"states_filter": []})
            assert "g" not in {g.group_id for g in listed.groups}
        finally:
            await client.close()

    _run(tmp_path, scenario)
