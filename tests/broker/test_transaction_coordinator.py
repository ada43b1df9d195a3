"""The transaction coordinator in a real broker, over the wire: FindCoordinator key type 1,
InitProducerId, AddPartitionsToTxn (v3 and v4 with verify_only), AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions, with markers written through this broker's own
WriteTxnMarkers handler: here a double that acknowledges every marker and records it (the real
handler belongs to the partition leaders' side), and the state reloaded from
`__transaction_state` after a restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import until
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import HANDLERS, Broker
from tidemark.coordinator.partitioner import partition_for
from tidemark.records.transaction_log_schema import TRANSACTION_STATE_TOPIC
from tidemark.wire.client import BrokerConnection

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS, WRITE_TXN_MARKERS = 65, 66, 27
TIMEOUT_S = 30.0  # a hang guard
SETTINGS = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "5"}


class MarkersDouble:
    """Stands for the WriteTxnMarkers handler: acknowledges every partition, records each marker."""

    def __init__(self) -> None:
        self.markers: list[Any] = []

    async def handle(self, ctx, request) -> dict[str, Any]:
        self.markers.extend(request.body.markers)
        return {"markers": [
            {"producer_id": m.producer_id, "topics": [
                {"name": t.name, "partitions": [{"partition_index": p, "error_code": 0} for p in t.partition_indexes]}
                for t in m.topics]}
            for m in request.body.markers]}


@contextlib.asynccontextmanager
async def _broker(data_dir: Path, double: MarkersDouble) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(SETTINGS), data_dir, port=0,
                    handlers={**HANDLERS, WRITE_TXN_MARKERS: (double.handle, 1)})
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def _retried(client: BrokerConnection, api_key: int, version: int, body: dict[str, Any],
                   code_of=lambda r: r.error_code) -> Any:
    """The request again while the coordinator loads or a transition is in flight (as clients do)."""
    while True:
        response = await client.request(api_key, version, body, TIMEOUT_S)
        if code_of(response) not in (ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions):
            return response
        await asyncio.sleep(0.01)


async def _describe(client: BrokerConnection, txn: str) -> Any:
    response = await client.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn]}, TIMEOUT_S)
    return response.transaction_states[0]


def test_a_transaction_over_the_wire_commits_through_the_markers_and_survives_a_restart(tmp_path):
    async def scenario() -> None:
        double = MarkersDouble()
        async with _broker(tmp_path, double) as broker:
            broker.replicas.create_topic("orders", 2, {})
            client = await BrokerConnection.connect("127.0.0.1", broker.port, "test", TIMEOUT_S)
            found = await client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx"]}, TIMEOUT_S)
            assert (found.coordinators[0].error_code, found.coordinators[0].port) == (ErrorCode.none, broker.port)
            assert broker.replicas.topic(TRANSACTION_STATE_TOPIC).configs["cleanup.policy"] == "compact"

            init = {"transactional_id": "tx", "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
            first = await _retried(client, INIT_PRODUCER_ID, 4, init)
            assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
            pid = first.producer_id
            again = await _retried(client, INIT_PRODUCER_ID, 4, init)
            assert (again.producer_id, again.producer_epoch) == (pid, 1)
            epoch = 1

            def add(topics):
                return {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": pid,
                        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topics}

            refused = await client.request(ADD_PARTITIONS, 3, add([{"name": "orders", "partitions": [0]},
                                                                   {"name": "nope", "partitions": [0]}]), TIMEOUT_S)
            codes = {(t.name, p.partition_index): p.partition_error_code
                     for t in refused.results_by_topic_v3_and_below for p in t.results_by_partition}
            assert codes == {("orders", 0): ErrorCode.operation_not_attempted,
                             ("nope", 0): ErrorCode.unknown_topic_or_partition}
            added = await client.request(ADD_PARTITIONS, 3, add([{"name": "orders", "partitions": [0, 1]}]),
                                         TIMEOUT_S)
            assert {p.partition_error_code for t in added.results_by_topic_v3_and_below
                    for p in t.results_by_partition} == {ErrorCode.none}
            offsets = await client.request(ADD_OFFSETS, 3, {"transactional_id": "tx", "producer_id": pid,
                                                            "producer_epoch": epoch, "group_id": "g"}, TIMEOUT_S)
            assert offsets.error_code == ErrorCode.none
            group_partition = partition_for("g", 5)

            # KIP-890 verification, as a partition leader asks it
            verified = await client.request(ADD_PARTITIONS, 4, {"transactions": [
                {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
                 "topics": [{"name": "orders", "partitions": [0]}]}]}, TIMEOUT_S)
            assert verified.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code \
                == ErrorCode.none

            described = await _describe(client, "tx")
            assert described.transaction_state == "Ongoing"
            assert {(t.topic, tuple(t.partitions)) for t in described.topics} == {
                ("orders", (0, 1)), ("__consumer_offsets", (group_partition,))}

            # an old epoch is fenced: INVALID_PRODUCER_EPOCH before EndTxn v2, PRODUCER_FENCED from it
            stale = {"transactional_id": "tx", "producer_id": pid, "producer_epoch": 0, "committed": True}
            assert (await client.request(END_TXN, 1, stale, TIMEOUT_S)).error_code == ErrorCode.invalid_producer_epoch
            assert (await client.request(END_TXN, 3, stale, TIMEOUT_S)).error_code == ErrorCode.producer_fenced

            ended = await client.request(END_TXN, 3, {**stale, "producer_epoch": epoch}, TIMEOUT_S)
            assert ended.error_code == ErrorCode.none
            await until(lambda: bool(double.markers))
            marker = double.markers[0]
            assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (pid, epoch, True)
            assert {(t.name, tuple(t.partition_indexes)) for t in marker.topics} == {
                ("orders", (0, 1)), ("__consumer_offsets", (group_partition,))}
            while (await _describe(client, "tx")).transaction_state != "CompleteCommit":
                await asyncio.sleep(0.01)

            listed = await client.request(LIST_TRANSACTIONS, 1, {"state_filters": ["CompleteCommit", "Bogus"],
                                                                 "producer_id_filters": [],
                                                                 "duration_filter": -1}, TIMEOUT_S)
            assert [(t.transactional_id, t.producer_id) for t in listed.transaction_states] == [("tx", pid)]
            assert list(listed.unknown_state_filters) == ["Bogus"]

            bad_timeout = await client.request(INIT_PRODUCER_ID, 4, {**init, "transaction_timeout": 900001},
                                               TIMEOUT_S)
            assert bad_timeout.error_code == ErrorCode.invalid_transaction_timeout
            empty = await client.request(INIT_PRODUCER_ID, 4, {**init, "transactional_id": ""}, TIMEOUT_S)
            assert empty.error_code == ErrorCode.invalid_request
            unknown = await _describe(client, "nobody")
            assert unknown.error_code == ErrorCode.transactional_id_not_found
            await client.close()

        # restarted: the state is reloaded from __transaction_state
        async with _broker(tmp_path, MarkersDouble()) as broker:
            client = await BrokerConnection.connect("127.0.0.1", broker.port, "test", TIMEOUT_S)
            while (described := await _describe(client, "tx")).error_code == ErrorCode.coordinator_load_in_progress:
                await asyncio.sleep(0.01)
            assert (described.transaction_state, described.producer_id, described.producer_epoch) == \
                ("CompleteCommit", pid, epoch)
            bumped = await _retried(client, INIT_PRODUCER_ID, 4, init)
            assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S * 2))


def test_librdkafka_commits_then_aborts_through_the_coordinator(tmp_path):
    """confluent-kafka's transactional producer against the in-process broker (its blocking calls
    on a worker thread): init, a committed transaction, then an aborted one, each finished by its
    markers."""
    confluent_kafka = __import__("pytest").importorskip("confluent_kafka")

    async def scenario() -> None:
        double = MarkersDouble()
        async with _broker(tmp_path, double) as broker:
            broker.replicas.create_topic("orders", 2, {})
            producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}",
                                                 "transactional.id": "app", "log_level": 0})
            client = await BrokerConnection.connect("127.0.0.1", broker.port, "test", TIMEOUT_S)

            def committed_then_begun() -> None:
                producer.init_transactions(TIMEOUT_S)
                producer.begin_transaction()
                producer.produce("orders", value=b"one", partition=0)
                producer.commit_transaction(TIMEOUT_S)

            await asyncio.to_thread(committed_then_begun)
            while (await _describe(client, "app")).transaction_state != "CompleteCommit":
                await asyncio.sleep(0.01)

            def aborted() -> None:
                producer.begin_transaction()
                producer.produce("orders", value=b"two", partition=1)
                producer.flush(TIMEOUT_S)
                producer.abort_transaction(TIMEOUT_S)

            await asyncio.to_thread(aborted)
            while (await _describe(client, "app")).transaction_state != "CompleteAbort":
                await asyncio.sleep(0.01)
            results = [(m.transaction_result, sorted((t.name, p) for t in m.topics for p in t.partition_indexes))
                       for m in double.markers]
            assert results == [(True, [("orders", 0)]), (False, [("orders", 1)])]
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S * 2))


class HeldMarkers(MarkersDouble):
    """The markers double, answering only once released (markers still being written)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.asked = 0

    async def handle(self, ctx, request) -> dict[str, Any]:
        self.asked += 1
        await self.release.wait()
        return await super().handle(ctx, request)


async def _committed_with_markers_held(broker: Broker, double: HeldMarkers) -> tuple[BrokerConnection, int, int]:
    """A transaction on orders-0 ended with EndTxn(commit), its markers held: (client, pid, epoch)."""
    broker.replicas.create_topic("orders", 2, {})
    client = await BrokerConnection.connect("127.0.0.1", broker.port, "test", TIMEOUT_S)
    init = await _retried(client, INIT_PRODUCER_ID, 4, {"transactional_id": "tx", "transaction_timeout": 60000,
                                                        "producer_id": -1, "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    added = await client.request(ADD_PARTITIONS, 3, _add("tx", pid, epoch, "orders", 0), TIMEOUT_S)
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
    ended = await client.request(END_TXN, 3, {"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                                              "committed": True}, TIMEOUT_S)
    assert ended.error_code == ErrorCode.none  # answered once PrepareCommit is durable
    await until(lambda: double.asked > 0)
    return client, pid, epoch


def _add(txn: str, pid: int, epoch: int, topic: str, partition: int) -> dict[str, Any]:
    return {"v3_and_below_transactional_id": txn, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}


def test_the_next_transactions_adds_wait_for_the_previous_ones_markers_instead_of_concurrent_transactions(tmp_path):
    """A producer beginning its next transaction right after EndTxn: its AddPartitionsToTxn and
    AddOffsetsToTxn find the previous one still completing and are answered once its markers and
    CompleteCommit are written (within add.partitions.to.txn.retry.backoff.max.ms, here a hang
    guard), not CONCURRENT_TRANSACTIONS for the client to retry after its back-off."""
    async def scenario() -> None:
        double = HeldMarkers()
        settings = {**SETTINGS, "add.partitions.to.txn.retry.backoff.max.ms": str(int(TIMEOUT_S * 1000))}
        broker = Broker(BrokerConfig(settings), tmp_path, port=0,
                        handlers={**HANDLERS, WRITE_TXN_MARKERS: (double.handle, 1)})
        await broker.start()
        try:
            client, pid, epoch = await _committed_with_markers_held(broker, double)
            adding, offsetting = [await BrokerConnection.connect("127.0.0.1", broker.port, "test", TIMEOUT_S)
                                  for _ in range(2)]
            add = asyncio.ensure_future(adding.request(ADD_PARTITIONS, 3, _add("tx", pid, epoch, "orders", 1),
                                                       TIMEOUT_S))
            offsets = asyncio.ensure_future(offsetting.request(ADD_OFFSETS, 3, {
                "transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch, "group_id": "g"}, TIMEOUT_S))
            # both are held (or, before they were, answered at once)
            await until(lambda: (add.done() and offsets.done())
                        or len(broker.transactions._durable_waiters.get("tx", ())) == 2)
            assert (await _describe(client, "tx")).transaction_state == "PrepareCommit"
            double.release.set()
            codes = {p.partition_error_code for t in (await add).results_by_topic_v3_and_below
                     for p in t.results_by_partition}
            assert codes == {ErrorCode.none}
            assert (await offsets).error_code == ErrorCode.none
            described = await _describe(client, "tx")
            assert described.transaction_state == "Ongoing"
            assert {(t.topic, tuple(t.partitions)) for t in described.topics} == {
                ("orders", (1,)), ("__consumer_offsets", (partition_for("g", 5),))}
            for connection in (client, adding, offsetting):
                await connection.close()
        finally:
            double.release.set()
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S * 2))


def test_with_no_wait_configured_an_add_during_the_markers_is_concurrent_transactions(tmp_path):
    async def scenario() -> None:
        double = HeldMarkers()
        settings = {**SETTINGS, "add.partitions.to.txn.retry.backoff.max.ms": "0"}
        broker = Broker(BrokerConfig(settings), tmp_path, port=0,
                        handlers={**HANDLERS, WRITE_TXN_MARKERS: (double.handle, 1)})
        await broker.start()
        try:
            client, pid, epoch = await _committed_with_markers_held(broker, double)
            added = await client.request(ADD_PARTITIONS, 3, _add("tx", pid, epoch, "orders", 1), TIMEOUT_S)
            assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == \
                ErrorCode.concurrent_transactions
            assert not broker.transactions._durable_waiters
            double.release.set()
            while (await _describe(client, "tx")).transaction_state != "CompleteCommit":
                await asyncio.sleep(0.01)
            await client.close()
        finally:
            double.release.set()
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT_S * 2))
