"""A broker in the test's own event loop, with a flusher the test holds: appends stay below the
high watermark (nothing is durable) until the test releases them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from tidemark.broker.config import BrokerConfig
from tidemark.replication.flusher import Flusher
from tidemark.replication.partition import Partition
from tidemark.broker.server import Broker


class HeldFlusher(Flusher):
    """A Flusher that, while held, keeps dirty partitions aside instead of fsyncing them."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = False
        self.held: dict[int, Partition] = {}

    def mark_dirty(self, partition: Partition) -> None:
        if self.holding:
            self.held[id(partition)] = partition
        else:
            super().mark_dirty(partition)

    def forget(self, partition: Partition) -> None:
        self.held.pop(id(partition), None)
        super().forget(partition)

    def release(self) -> None:
        self.holding = False
        held, self.held = self.held, {}
        for partition in held.values():
            super().mark_dirty(partition)


@contextlib.asynccontextmanager
async def running_broker(data_dir: Path, settings: dict[str, str] | None = None) -> AsyncIterator[Broker]:
    """A started Broker on a free loopback port whose `replicas.flusher` is a HeldFlusher."""
    broker = Broker(BrokerConfig(settings or {}), data_dir, port=0)
    broker.replicas.flusher = HeldFlusher()
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def until(condition) -> None:
    """Wait (on the event loop) until condition() holds; the caller bounds the whole test."""
    while not condition():
        await asyncio.sleep(0.001)
