"""The coordinator runtime on an in-memory offsets topic with a manual clock.

`coordinator_harness` runs a scenario coroutine against a real `GroupCoordinator` whose
partitions are `InMemoryPartitionWriter`s and whose time is a `ManualClock`: tests decide when
the high watermark moves and when time passes, so nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.broker.config import BrokerConfig
from tidemark.broker.errors import error_code_for
from tidemark.coordinator.group_coordinator import GroupCoordinator
from tidemark.coordinator.result import OffsetsRecord
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

START_MS = 1_700_000_000_000


class _Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """Time moves only when the test says so; due callbacks run in deadline order."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now = now_ms
        self._due: list[tuple[int, int, _Handle, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self.now

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> _Handle:
        handle = _Handle()
        heapq.heappush(self._due, (deadline_ms, next(self._seq), handle, callback))
        return handle

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while self._due and self._due[0][0] <= target:
            deadline, _, handle, callback = heapq.heappop(self._due)
            self.now = max(self.now, deadline)
            if not handle.cancelled:
                callback()
        self.now = target


class InMemoryPartitionWriter:
    """An offsets partition in memory. The high watermark moves at append (`auto_commit`) or
    when the test calls `commit()`; `fail_reads` makes that many loads fail."""

    def __init__(self, auto_commit: bool = True) -> None:
        self.records: list[tuple[bytes | None, bytes | None]] = []
        self.high_watermark = 0
        self.log_start_offset = 0
        self.auto_commit = auto_commit
        self.fail_reads = 0
        self.fail_appends = 0  # that many appends raise, writing nothing
        self.isr_below_min = False  # the ISR shrank below min.insync.replicas
        self.batch_ends: list[int] = []  # where each append ended: the high watermark's stops
        self.reads = 0
        self.on_read: Callable[[InMemoryPartitionWriter], None] | None = None
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._truncation_listeners: list[Callable[[int], None]] = []

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    def on_truncation(self, listener: Callable[[int], None]) -> Callable[[], None]:
        self._truncation_listeners.append(listener)
        return lambda: self._truncation_listeners.remove(listener)

    def append(self, records: list[OffsetsRecord], now_ms: int) -> int:
        if self.fail_appends:
            self.fail_appends -= 1
            raise OSError("injected append failure")
        self.records.extend((r.key, r.value) for r in records)
        self.batch_ends.append(self.log_end_offset)
        if self.auto_commit:
            self.commit()
        return self.log_end_offset

    def commit(self, to: int | None = None) -> None:
        self.high_watermark = self.log_end_offset if to is None else to
        waiting = []
        for target, future in self._waiters:
            if future.done():
                continue
            if target <= self.high_watermark:
                future.set_result(None)
            else:
                waiting.append((target, future))
        self._waiters = waiting

    def below_min_insync(self) -> bool:
        return self.isr_below_min

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        if offset <= self.high_watermark:
            future.set_result(None)
        else:
            self._waiters.append((offset, future))
        return future

    def read(self, position: int, upper_bound: int) -> tuple[list[tuple[int, bytes | None, bytes | None]], int]:
        self.reads += 1
        if self.fail_reads:
            self.fail_reads -= 1
            raise OSError("injected read failure")
        if self.on_read is not None:
            self.on_read(self)
        end = min(upper_bound, position + 2)  # small chunks: loads take several reads
        chunk = [(offset, *self.records[offset]) for offset in range(position, end)]
        return chunk, end


class InMemoryOffsetsTopic:
    def __init__(self, partitions: int, topics: set[tuple[str, int]]) -> None:
        self.partitions = partitions
        self.exists = False
        self.writers: dict[int, InMemoryPartitionWriter] = {}
        self.topics = topics
        self._deleted: list[Callable[[], None]] = []
        self.auto_commit = True

    def partition_count(self) -> int | None:
        return self.partitions if self.exists else None

    def create(self) -> None:
        self.exists = True
        self.writers = {i: InMemoryPartitionWriter(self.auto_commit) for i in range(self.partitions)}

    def writer(self, index: int) -> InMemoryPartitionWriter | None:
        return self.writers.get(index) if self.exists else None

    def partition_exists(self, topic: str, partition: int) -> bool:
        return (topic, partition) in self.topics

    def on_deleted(self, callback: Callable[[], None]) -> None:
        self._deleted.append(callback)

    def error_code(self, exc: BaseException) -> ErrorCode:
        return error_code_for(exc)

    def delete(self) -> None:
        self.exists = False
        self.writers = {}
        for callback in self._deleted:
            callback()


def offset_commit(coordinator: GroupCoordinator, offset: int, group: str = "g", partition: int = 0,
                  generation: int = -1, member: str = "") -> Awaitable[Any]:
    """An OffsetCommit of orders-`partition` as the API handler makes it (a coroutine: awaiting
    it submits at once, before other tasks run)."""
    request = build(load_request_schema(ApiKey.OFFSET_COMMIT, 8), {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
        "group_instance_id": None, "topics": [{"name": "orders", "partitions": [
            {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return coordinator.call(
        group, lambda shard, token, now: shard.commit_offsets(request, 8, token, now),
        lambda code: {"topics": [{"partitions": [{"error_code": code}]}]})


def commit_code(response: dict[str, Any]) -> ErrorCode:
    return response["topics"][0]["partitions"][0]["error_code"]


class Harness:
    def __init__(self, settings: dict[str, str]) -> None:
        self.clock = ManualClock()
        self.topic = InMemoryOffsetsTopic(1, {("orders", 0), ("orders", 1)})
        config = BrokerConfig({"offsets.topic.num.partitions": "1", **settings})
        self.coordinator = GroupCoordinator(config, topic=self.topic, clock=self.clock)

    @property
    def writer(self) -> InMemoryPartitionWriter:
        return self.topic.writers[0]

    @property
    def shard(self):
        return self.coordinator.shards[0]

    async def settle(self) -> None:
        """Let every runnable task run until nothing is left to do (no wall clock involved)."""
        for _ in range(50):
            await asyncio.sleep(0)

    async def start(self) -> None:
        self.topic.create()
        self.coordinator.start()
        await self.settle()

    # -- requests, as the API handlers make them ---------------------------------------------

    def commit(self, offset: int, group: str = "g", partition: int = 0, generation: int = -1,
               member: str = "") -> Awaitable[Any]:
        return offset_commit(self.coordinator, offset, group, partition, generation, member)

    @staticmethod
    def commit_code(response: dict[str, Any]) -> ErrorCode:
        return commit_code(response)

    async def fetch(self, group: str = "g", partition: int = 0) -> tuple[ErrorCode, int]:
        """(group error, committed offset) as OffsetFetch would answer."""
        return await self.coordinator.read(
            group,
            lambda shard: (ErrorCode.none,
                           shard.fetch_offsets(group, [("orders", [partition])], False)[0]["partitions"][0]
                           ["committed_offset"]),
            lambda code: (code, -1))

    def join(self, member: str = "", group: str = "g", session_ms: int = 10_000,
             rebalance_ms: int = 10_000) -> asyncio.Task[Any]:
        request = build(load_request_schema(ApiKey.JOIN_GROUP, 5), {
            "group_id": group, "session_timeout": session_ms, "rebalance_timeout": rebalance_ms,
            "member_id": member, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        return asyncio.ensure_future(self.coordinator.call(
            group, lambda shard, token, now: shard.membership.join_group(request, 5, token, now, "c", "h"),
            lambda code: {"error_code": code}))


@pytest.fixture
def coordinator_harness() -> Callable[..., None]:
    """run(scenario, **settings): build a Harness inside an event loop and run the scenario."""
    def run(scenario: Callable[[Harness], Awaitable[None]], **settings: str) -> None:
        async def main() -> None:
            harness = Harness({key.replace("_", "."): value for key, value in settings.items()})
            try:
                await scenario(harness)
            finally:
                await harness.coordinator.stop()

        asyncio.run(asyncio.wait_for(main(), timeout=30))

    return run
