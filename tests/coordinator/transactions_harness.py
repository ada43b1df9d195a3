"""A transaction coordinator on an in-memory `__transaction_state` with a manual clock, and a
WriteTxnMarkers double standing for the partition leaders: tests decide what each leader answers
and when time passes."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from tests.coordinator.conftest import InMemoryOffsetsTopic, ManualClock
from tidemark.broker.config import BrokerConfig
from tidemark.coordinator.transactions.coordinator import TransactionCoordinator
from tidemark.coordinator.transactions.shard import NEEDS_PRODUCER_ID
from tidemark.records.transaction_log_schema import decode_transaction_key, decode_transaction_value

TopicPartition = tuple[str, int]


class FakeLeaders:
    """The partition leaders as the marker sender reaches them: every partition exists and is led
    by broker 1 unless the test says otherwise; each WriteTxnMarkers is recorded and answered
    NONE for every partition, or with what `answers` says (popped per partition, in order)."""

    def __init__(self) -> None:
        self.leaders: dict[TopicPartition, int | None] = {}
        self.deleted: set[TopicPartition] = set()
        self.answers: dict[TopicPartition, list[ErrorCode]] = {}
        self.requests: list[tuple[int, dict[str, Any]]] = []
        self.unreachable: set[int] = set()

    def partition_exists(self, topic: str, partition: int) -> bool:
        return (topic, partition) not in self.deleted

    def leader_of(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition), 1)

    async def write_markers(self, broker_id: int, request: dict[str, Any]) -> dict[int, dict[TopicPartition, ErrorCode]]:
        self.requests.append((broker_id, request))
        if broker_id in self.unreachable:
            raise ConnectionError(f"broker {broker_id} is down")
        errors: dict[int, dict[TopicPartition, ErrorCode]] = {}
        for marker in request["markers"]:
            by_partition = errors.setdefault(marker["producer_id"], {})
            for topic in marker["topics"]:
                for partition in topic["partition_indexes"]:
                    queued = self.answers.get((topic["name"], partition))
                    by_partition[(topic["name"], partition)] = queued.pop(0) if queued else ErrorCode.none
        return errors

    def marked(self) -> list[tuple[int, int, int, bool, int, list[TopicPartition]]]:
        """(broker, producer id, epoch, commit, coordinator epoch, partitions) of each marker sent."""
        return [(broker, m["producer_id"], m["producer_epoch"], m["transaction_result"], m["coordinator_epoch"],
                 [(t["name"], p) for t in m["topics"] for p in t["partition_indexes"]])
                for broker, request in self.requests for m in request["markers"]]


class TxnHarness:
    def __init__(self, settings: dict[str, str] | None = None, topic: InMemoryOffsetsTopic | None = None,
                 clock: ManualClock | None = None) -> None:
        self.clock = clock or ManualClock()
        self.topic = topic or InMemoryOffsetsTopic(1, set())
        self.leaders = FakeLeaders()
        config = BrokerConfig({"transaction.state.log.num.partitions": "1", "request.timeout.ms": "5000",
                               **(settings or {})})
        self.coordinator = TransactionCoordinator(config, topic=self.topic, destinations=self.leaders,
                                                  clock=self.clock)
        self._next_id = 1000

    @property
    def writer(self):
        return self.topic.writers[0]

    async def settle(self) -> None:
        for _ in range(100):
            await asyncio.sleep(0)

    async def start(self) -> None:
        if not self.topic.exists:
            self.topic.create()
        self.coordinator.start()
        await self.settle()

    def records(self) -> list[tuple[str, Any]]:
        """The log as (transactional id, value or None) records."""
        return [(decode_transaction_key(k), None if v is None else decode_transaction_value(v))
                for k, v in self.writer.records]

    # -- requests, as the API handlers make them ------------------------------------------------

    async def init(self, txn: str = "t", timeout_ms: int = 60_000,
                   expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
        async def call(fresh: int | None) -> Any:
            return await self.coordinator.call(
                txn, lambda shard, token, now: shard.init_producer_id(txn, timeout_ms, expected, token, now, fresh),
                lambda code: (code, -1, -1))
        result = await call(None)
        if result is NEEDS_PRODUCER_ID:
            self._next_id += 1
            result = await call(self._next_id)
        return result

    def add(self, txn: str, producer_id: int, epoch: int, *partitions: TopicPartition) -> Awaitable[ErrorCode]:
        return self.coordinator.call(
            txn, lambda shard, token, now: shard.add_partitions(txn, producer_id, epoch, partitions, token, now),
            lambda code: code)

    def end(self, txn: str, producer_id: int, epoch: int, commit: bool) -> Awaitable[ErrorCode]:
        return self.coordinator.call(
            txn, lambda shard, token, now: shard.end_transaction(txn, producer_id, epoch, commit, token, now),
            lambda code: code)

    def describe(self, txn: str = "t") -> Awaitable[dict[str, Any]]:
        return self.coordinator.read(txn, lambda shard: shard.describe(txn, self.coordinator.markers.written),
                                     lambda code: {"error_code": code})

    def state(self, txn: str = "t") -> str:
        shard = self.coordinator.shards[0].shard
        metadata = shard.committed_state(txn)
        return metadata.state.kafka_name if metadata is not None else "none"


def run(scenario: Callable[[TxnHarness], Awaitable[None]], **settings: str) -> None:
    async def main() -> None:
        harness = TxnHarness({key.replace("_", "."): value for key, value in settings.items()})
        try:
            await scenario(harness)
        finally:
            await harness.coordinator.stop()

    asyncio.run(asyncio.wait_for(main(), timeout=30))
