"""How the coordinator runtime reaches its log and time (Kafka's PartitionWriter, our own Clock).

The runtime sees a coordinator partition only as a `PartitionWriter` and time only as a `Clock`,
so tests drive it with an in-memory writer and a manual clock, and the broker hands it a
replicated partition (broker/coordinator_io.py) without the runtime importing the broker.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Protocol

from kio.schema.errors import ErrorCode

from tidemark.coordinator.result import OffsetsRecord

class Meter:
    """Time the runtime spent on one caller's events (its shard handler and the append), so the
    caller can be charged for it (request quotas)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0


# The meter of whoever submits events from this context (None: nobody is metered).
EVENT_METER: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("tidemark_event_meter", default=None)

# (log offset, key, value) of one record read back for loading
LogRecord = tuple[int, bytes | None, bytes | None]


class PartitionWriter(Protocol):
    """One coordinator partition as the runtime uses it."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def append(self, records: list[OffsetsRecord], now_ms: int) -> int:
        """Append records as one batch; the offset they end at (exclusive). Raises on failure."""
        ...

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        """Done once the high watermark reaches `offset`; failed if the partition goes away, or
        (with what the topic's error_code maps to NOT_LEADER_OR_FOLLOWER) if the leadership that
        appended records not yet committed ends before they are."""
        ...

    def below_min_insync(self) -> bool:
        """Whether fewer replicas are in sync than acknowledging a commit needs (a committed
        write is then answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as an acks=-1 produce is)."""
        ...

    def read(self, position: int, upper_bound: int) -> tuple[list[LogRecord], int]:
        """One chunk of records from `position` below `upper_bound`, and the position after it."""
        ...

    def on_truncation(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Call `listener` after every truncation of the log with the first offset whose record
        left it; returns what stops the calls."""
        ...


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> Cancellable: ...


class CoordinatorTopic(Protocol):
    """The topic a coordinator keeps its state in (`__consumer_offsets` for groups)."""

    def partition_count(self) -> int | None:
        """Its partition count, or None while it does not exist."""
        ...

    def create(self) -> None: ...

    def writer(self, index: int) -> PartitionWriter | None: ...

    def partition_exists(self, topic: str, partition: int) -> bool: ...

    def on_deleted(self, callback: Callable[[], None]) -> None: ...

    def error_code(self, exc: BaseException) -> ErrorCode:
        """The Kafka error code for a failure of an append or of the log."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def call_at(self, deadline_ms: int, callback: Callable[[], None]) -> Cancellable:
        delay = max(0.0, (deadline_ms - self.now_ms()) / 1000)
        return asyncio.get_running_loop().call_later(delay, callback)
