"""A leader's ISR loop outlives ZooKeeper trouble: an ISR write that fails because the session
expired ends only that round; the loop waits for the session to be back and then writes the
ISR. And a cluster task that dies of anything else takes the broker down loudly."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import SessionExpiredError

from tidemark.broker.cluster.isr_maintenance import IsrMaintenance
from tidemark.broker.cluster.tasks import BackgroundTasks
from tidemark.cluster.zk import zk_data

WAIT_S = 30.0  # a bound that ends a hung test, not a margin


class FakeSession:
    """ZkSession's surface: the first call fails as a write on an expired session does."""

    def __init__(self) -> None:
        self.client = None
        self.failures: list[Exception] = [SessionExpiredError()]
        self.calls = 0
        self.asked_at_call: list[list[frozenset[int]]] = []  # what the partition was told before each call
        self.partition: LedPartition | None = None
        self.called = asyncio.Event()
        self._connected = asyncio.Event()
        self._connected.set()

    async def call(self, _function: Any, *args: Any, **_kwargs: Any) -> zk_data.PartitionState:
        self.calls += 1
        if self.partition is not None:
            self.asked_at_call.append(list(self.partition.asked))
        self.called.set()
        if self.failures:
            self._connected.clear()  # kazoo is opening a new session
            raise self.failures.pop(0)
        _client, broker_id, _topic, _partition, epoch, isr, version = args
        return zk_data.PartitionState(leader=broker_id, leader_epoch=epoch, isr=tuple(isr), controller_epoch=1,
                                      zk_version=version + 1)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def reconnected(self) -> None:
        self._connected.set()


@dataclass
class Log:
    log_end_offset: int = 0


@dataclass
class LedPartition:
    """A led partition whose follower 2 caught up: the ISR wants 2 back."""

    topic: str = "orders"
    index: int = 0
    is_leader: bool = True
    replicas: tuple[int, ...] = (1, 2)
    leader_epoch: int = 0
    zk_version: int = 3
    isr: frozenset[int] = frozenset({1})
    followers: dict[int, Any] = field(default_factory=dict)
    log: Log = field(default_factory=Log)
    asked: list[frozenset[int]] = field(default_factory=list)  # isr_write_pending's calls
    isr_unconfirmed: frozenset[int] | None = None

    def isr_to_shrink(self, _now_ms: int, _lag_ms: int) -> frozenset[int] | None:
        return None

    def isr_to_expand(self) -> frozenset[int] | None:
        return None if 2 in self.isr else self.isr | {2}

    def isr_write_pending(self, wanted: frozenset[int]) -> None:
        self.asked.append(wanted)

    def update_isr(self, isr: frozenset[int], zk_version: int) -> None:
        self.isr, self.zk_version = isr, zk_version


class Replicas:
    def __init__(self, partition: LedPartition) -> None:
        self.partitions = {(partition.topic, partition.index): partition}

    def schedule_flush(self, _partition: LedPartition) -> None:
        pass


class Config(dict):
    node_id = 1


class Clock:
    def now_ms(self) -> int:
        return 0


async def _until(condition, what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.01)


def test_the_isr_loop_survives_a_session_expiry_and_expands_the_isr_afterwards() -> None:
    async def scenario() -> None:
        session, partition = FakeSession(), LedPartition()
        maintenance = IsrMaintenance(Config({"replica.lag.time.max.ms": 200}), session, Replicas(partition), Clock())
        loop = asyncio.create_task(maintenance.run())
        async with asyncio.timeout(WAIT_S):
            await session.called.wait()  # the first write: the session expired under it
        assert partition.isr == {1}
        session.reconnected()
        await _until(lambda: partition.isr == {1, 2} or loop.done(), "the ISR written once the session is back")
        assert not loop.done(), loop.exception()
        assert (partition.isr, partition.zk_version, session.calls) == ({1, 2}, 4, 2)
        loop.cancel()

    asyncio.run(scenario())


def test_the_isr_asked_for_counts_before_the_write_and_after_it_failed() -> None:
    """KIP-497: the leader counts the ISR it asks for from before the write (ZooKeeper may list
    it before the answer comes); a failed write does not end that (it may have been stored)."""
    async def scenario() -> None:
        session, partition = FakeSession(), LedPartition()
        session.partition = partition
        maintenance = IsrMaintenance(Config({"replica.lag.time.max.ms": 200}), session, Replicas(partition), Clock())
        try:
            await maintenance.check()
        except SessionExpiredError:
            pass
        assert session.asked_at_call == [[frozenset({1, 2})]]
        assert partition.isr == {1}
        session.reconnected()
        await maintenance.check()
        assert session.asked_at_call[-1] == [frozenset({1, 2}), frozenset({1, 2})]
        assert (partition.isr, partition.zk_version) == ({1, 2}, 4)

    asyncio.run(scenario())


def test_an_isr_write_left_without_answer_is_asked_again() -> None:
    """As Kafka resends an AlterPartition until answered: the ISR last asked for is written
    again while unconfirmed, even once nobody wants it any more (the replica it adds may never
    fetch again, and holds the high watermark until the leader learns the stored ISR)."""
    async def scenario() -> None:
        session, partition = FakeSession(), LedPartition(isr=frozenset({1, 2}))
        session.failures = []
        partition.isr_unconfirmed = frozenset({1, 2, 3})
        maintenance = IsrMaintenance(Config({"replica.lag.time.max.ms": 200}), session, Replicas(partition), Clock())
        await maintenance.check()
        assert session.calls == 1 and partition.isr == {1, 2, 3}

    asyncio.run(scenario())


def test_a_cluster_task_that_dies_takes_the_broker_down() -> None:
    async def scenario() -> list[BaseException]:
        fatal: list[BaseException] = []
        died = asyncio.Event()

        def on_fatal(exc: BaseException) -> None:
            fatal.append(exc)
            died.set()

        async def broken() -> None:
            raise RuntimeError("a bug")

        tasks = BackgroundTasks(on_fatal)
        tasks.spawn(broken(), "broken")
        async with asyncio.timeout(WAIT_S):
            await died.wait()
        await tasks.cancel_all()
        return fatal

    fatal = asyncio.run(scenario())
    assert [type(exc) for exc in fatal] == [RuntimeError]
