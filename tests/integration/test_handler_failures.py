"""A real client learns that a request failed when its handler crashes.

The broker runs in-process (in a thread of its own) with a handler table whose Produce entry
raises: a fault injected through the table, no patching. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tidemark.broker.config import BrokerConfig
from tidemark.broker.context import RequestContext
from tidemark.broker.server import HANDLERS, Broker

PRODUCE = 0
WAIT_S = 30


async def _crash(ctx: RequestContext, request: Any) -> Any:
    raise RuntimeError("injected produce failure")


class ThreadedBroker:
    """A Broker on its own event loop in a thread, on a free loopback port."""

    def __init__(self, data_dir, handlers) -> None:
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(BrokerConfig({}), data_dir, port=0, handlers=handlers)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> ThreadedBroker:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(WAIT_S)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(WAIT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)
        self.loop.close()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker.port}"


@pytest.fixture
def crashing_produce(tmp_path) -> Iterator[ThreadedBroker]:
    handlers = dict(HANDLERS)
    handlers[PRODUCE] = (_crash, HANDLERS[PRODUCE][1])
    with ThreadedBroker(tmp_path, handlers) as broker:
        yield broker


def test_confluent_kafka_producer_gets_the_error_not_a_success(crashing_produce):
    admin = AdminClient({"bootstrap.servers": crashing_produce.bootstrap})
    admin.create_topics([NewTopic("crashes", num_partitions=1, replication_factor=1)])["crashes"].result(WAIT_S)
    reports: list[tuple[Any, Any]] = []
    producer = Producer({"bootstrap.servers": crashing_produce.bootstrap, "acks": "all", "retries": 0,
                         "message.timeout.ms": WAIT_S * 1000})
    producer.produce("crashes", value=b"v", partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
    assert producer.flush(WAIT_S) == 0
    (err, msg), = reports
    assert err is not None, f"delivered at offset {msg.offset()} although the broker failed"
    assert err.code() == KafkaError.UNKNOWN
