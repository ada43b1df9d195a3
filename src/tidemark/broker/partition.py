"""A partition this broker leads: its log, its high watermark and who waits on it.

On a single broker the high watermark is the durably flushed end of the log: a record is
"committed" once it is fsynced. Every path that acknowledges a committed write (acks=-1, and
later offset commits) waits on the high watermark, never on the write call, so replication can
move the high watermark later without changing those paths.
"""

from __future__ import annotations

import asyncio

from tidemark.log.unified_log import UnifiedLog


class Partition:
    def __init__(self, topic: str, index: int, log: UnifiedLog, leader_epoch: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.leader_epoch = leader_epoch
        self._hw_waiters: list[tuple[int, asyncio.Future[None]]] = []
        # One future shared by every long-poll fetch of this partition, replaced at each
        # advance: waiters that time out leave nothing behind.
        self._advanced: asyncio.Future[None] | None = None

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def advance_high_watermark(self, offset: int) -> None:
        if offset <= self.log.high_watermark:
            return
        self.log.update_high_watermark(offset)
        still_waiting = []
        for target, future in self._hw_waiters:
            if future.done():
                continue
            if offset >= target:
                future.set_result(None)
            else:
                still_waiting.append((target, future))
        self._hw_waiters = still_waiting
        self._wake_fetchers()

    def wait_for_high_watermark(self, target: int) -> asyncio.Future[None]:
        """A future done once the high watermark reaches `target` (an exclusive end offset)."""
        future = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= target:
            future.set_result(None)
        else:
            self._hw_waiters.append((target, future))
        return future

    def watch(self) -> asyncio.Future[None]:
        """A future done at the next high watermark advance (wakes long-poll fetches).

        Shared between callers: await it (or asyncio.wait on it) but never cancel it."""
        if self._advanced is None:
            self._advanced = asyncio.get_running_loop().create_future()
        return self._advanced

    def _wake_fetchers(self) -> None:
        advanced, self._advanced = self._advanced, None
        if advanced is not None and not advanced.done():
            advanced.set_result(None)

    def fail_waiters(self, exc: BaseException) -> None:
        for _, future in self._hw_waiters:
            if not future.done():
                future.set_exception(exc)
        self._hw_waiters = []
        self._wake_fetchers()
