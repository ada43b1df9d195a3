"""The Spark sources' and jobs' Kafka clients keep librdkafka's log off stderr (no JVM here)."""

from __future__ import annotations

import logging
import socket

import pytest
from confluent_kafka import Consumer, KafkaException

from tidemark.spark.clients import LOGGER, quiet
from tidemark.spark.cluster import ClusterClient
from tidemark.spark.options import Subscription


@pytest.fixture
def closed_port():
    with socket.socket() as probe:  # bound, never listening: every connect is refused
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]


def test_an_unreachable_server_prints_nothing(closed_port, capfd, caplog, monkeypatch):
    monkeypatch.setattr("tidemark.spark.cluster.REQUEST_TIMEOUT_S", 2.0)
    bootstrap = f"127.0.0.1:{closed_port}"
    with caplog.at_level(logging.DEBUG, logger=LOGGER.name):
        consumer = Consumer(quiet({"bootstrap.servers": bootstrap, "group.id": "g"}))
        try:
            with pytest.raises(KafkaException):
                consumer.list_topics(timeout=2)
            consumer.poll(0)  # serves the queued log lines to the logger
        finally:
            consumer.close()
        with pytest.raises(KafkaException):
            ClusterClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": "2000"}).partitions(
                Subscription(pattern=".*"))
    # librdkafka's lines (the refused connects) reach the logger, none is printed.
    assert any("Connection refused" in record.getMessage() for record in caplog.records)
    assert capfd.readouterr().err == ""
