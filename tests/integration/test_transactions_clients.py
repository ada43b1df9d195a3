"""Transactional producers against a real tidemark broker, at the transaction coordinator's
level: FindCoordinator key type 1 names the coordinator, InitProducerId hands out a producer id
and bumps its epoch, and a librdkafka producer's init/begin/commit/abort go through
AddPartitionsToTxn and EndTxn. Completing the transactions and what a read_committed consumer
sees need the partition leaders' side (the WriteTxnMarkers handler): that part runs once the
broker serves it, and is skipped before."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient

FIND_COORDINATOR, INIT_PRODUCER_ID, API_VERSIONS, WRITE_TXN_MARKERS, DESCRIBE_TRANSACTIONS = 10, 22, 18, 27, 65
WAIT_S = 60.0  # a hang guard, not a margin


def _until(ask, done) -> Any:
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = ask()
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


def _init(client: RawClient, txn: str) -> Any:
    return _until(lambda: client.request(INIT_PRODUCER_ID, 4, {
        "transactional_id": txn, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}),
        lambda r: r.error_code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions))


def _described(client: RawClient, txn: str) -> Any:
    return client.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn]}).transaction_states[0]


def test_find_coordinator_names_this_broker_and_init_producer_id_bumps_the_epoch(broker):
    with RawClient(broker.bootstrap) as client:
        found = client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["txn"]})
        (coordinator,) = found.coordinators
        assert coordinator.error_code == ErrorCode.none
        host, port = broker.bootstrap.rsplit(":", 1)
        assert (coordinator.host, coordinator.port) == (host, int(port))
        first = _init(client, "txn")
        assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
        second = _init(client, "txn")
        assert (second.error_code, second.producer_id, second.producer_epoch) == \
            (ErrorCode.none, first.producer_id, 1)
        # The idempotent producer (no transactional id) still gets a fresh id of its own.
        idempotent = client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout": -1, "producer_id": -1, "producer_epoch": -1})
        assert idempotent.error_code == ErrorCode.none and idempotent.producer_id not in (-1, first.producer_id)


def test_confluent_kafka_init_begin_commit_then_abort(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from tests.integration.clients import consume_assigned, create_topic
    create_topic(broker.bootstrap, "txn-orders", 2)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "orders-app",
                                         "log_level": 0})
    producer.init_transactions(WAIT_S)
    producer.begin_transaction()
    producer.produce("txn-orders", key=b"k", value=b"committed", partition=0)
    producer.commit_transaction(WAIT_S)  # AddPartitionsToTxn, then EndTxn answered once PrepareCommit is durable
    with RawClient(broker.bootstrap) as client:
        described = _described(client, "orders-app")
        assert described.error_code == ErrorCode.none
        assert described.transaction_state in ("PrepareCommit", "CompleteCommit")
        versions = client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        if WRITE_TXN_MARKERS not in {api.api_key for api in versions.api_keys}:
            pytest.skip("the markers need the partition leaders' WriteTxnMarkers handler")
        assert _until(lambda: _described(client, "orders-app").transaction_state,
                      lambda state: state == "CompleteCommit") == "CompleteCommit"
        producer.begin_transaction()
        producer.produce("txn-orders", key=b"k", value=b"aborted", partition=1)
        producer.flush(WAIT_S)
        producer.abort_transaction(WAIT_S)
        assert _until(lambda: _described(client, "orders-app").transaction_state,
                      lambda state: state == "CompleteAbort") == "CompleteAbort"
        producer.begin_transaction()
        producer.produce("txn-orders", key=b"k", value=b"after", partition=1)
        producer.commit_transaction(WAIT_S)
    # End to end (with the leaders' side merged): read_committed sees the committed records at
    # their offsets, never the aborted one (offset 0 of partition 1; its marker is offset 1).
    seen = consume_assigned(broker.bootstrap, "txn-orders", 2, 2, **{"isolation.level": "read_committed"})
    assert seen == {0: [(0, b"k", b"committed")], 1: [(2, b"k", b"after")]}


def test_kafka_python_and_aiokafka_init_and_commit_a_transaction(broker):
    kafka = pytest.importorskip("kafka")
    aiokafka = pytest.importorskip("aiokafka")
    import asyncio
    from tests.integration.clients import create_topic
    create_topic(broker.bootstrap, "txn-python", 1)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kafka-python-app")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("txn-python", b"one").get(timeout=WAIT_S)
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)

    async def aiokafka_commit() -> None:
        transactional = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aiokafka-app")
        await asyncio.wait_for(transactional.start(), WAIT_S)
        try:
            async with transactional.transaction():
                await transactional.send_and_wait("txn-python", b"two")
        finally:
            await transactional.stop()

    asyncio.run(asyncio.wait_for(aiokafka_commit(), WAIT_S))
    with RawClient(broker.bootstrap) as client:
        for txn in ("kafka-python-app", "aiokafka-app"):
            described = _described(client, txn)
            assert (described.error_code, described.producer_epoch) == (ErrorCode.none, 0)
            assert described.transaction_state in ("PrepareCommit", "CompleteCommit")
