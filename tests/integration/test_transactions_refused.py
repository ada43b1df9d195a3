"""Transactions are refused as "not supported" (UNSUPPORTED_VERSION), never as an authorization
failure: there is no transaction coordinator, and TRANSACTIONAL_ID_AUTHORIZATION_FAILED sends
operators looking at ACLs that do not exist."""

from __future__ import annotations

import asyncio
import time

import pytest
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient

FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22
WAIT_S = 60.0  # a hang guard, not a margin


def test_find_coordinator_names_a_broker_and_init_producer_id_refuses_the_transactional_id(broker):
    with RawClient(broker.bootstrap) as client:
        found = client.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["txn"]})
        (coordinator,) = found.coordinators
        assert coordinator.error_code == ErrorCode.none
        host, port = broker.bootstrap.rsplit(":", 1)
        assert (coordinator.host, coordinator.port) == (host, int(port))
        refused = client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": "txn", "transaction_timeout_ms": 60000, "producer_id": -1, "producer_epoch": -1})
        assert refused.error_code == ErrorCode.unsupported_version
        assert (refused.producer_id, refused.producer_epoch) == (-1, -1)
        # The idempotent producer (no transactional id) still gets its producer id.
        idempotent = client.request(INIT_PRODUCER_ID, 4, {
            "transactional_id": None, "transaction_timeout_ms": -1, "producer_id": -1, "producer_epoch": -1})
        assert idempotent.error_code == ErrorCode.none and idempotent.producer_id >= 0


def test_confluent_kafka_init_transactions_reports_unsupported_version(broker):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "txn",
                                         "log_level": 0})
    # librdkafka retries a refused InitProducerId and names the broker's error when the call's
    # timeout ends; a call that timed out before any answer says only _TIMED_OUT and is resumed.
    deadline = time.monotonic() + WAIT_S
    while True:
        with pytest.raises(confluent_kafka.KafkaException) as raised:
            producer.init_transactions(1)
        error = raised.value.args[0]
        if error.code() != confluent_kafka.KafkaError._TIMED_OUT or time.monotonic() > deadline:
            break
    assert error.code() == confluent_kafka.KafkaError.UNSUPPORTED_VERSION, error.str()
    assert "authoriz" not in error.str().lower()


def test_kafka_python_and_aiokafka_fail_at_once_with_unsupported_version(broker):
    kafka = pytest.importorskip("kafka")
    aiokafka = pytest.importorskip("aiokafka")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn")
    try:
        with pytest.raises(kafka.errors.KafkaError, match="UnsupportedVersionError"):
            producer.init_transactions()
    finally:
        producer.close(timeout=5)

    async def start_aiokafka() -> None:
        transactional = aiokafka.AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="txn")
        try:
            with pytest.raises(aiokafka.errors.UnsupportedVersionError):
                await asyncio.wait_for(transactional.start(), WAIT_S)
        finally:
            await transactional.stop()

    asyncio.run(start_aiokafka())
