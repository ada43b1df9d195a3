"""The cluster link's background tasks (ISR maintenance, config reloads), supervised.

Each task handles the failures it expects itself (a ZooKeeper call that failed, a session that
expired: it waits for the session and goes on). One that ends any other way is a bug the broker
cannot work around (a leader that can no longer move its ISRs would hold acks=all forever), so
it is logged with its traceback and the broker halts with a non-zero status, as Kafka halts on
a fatal error: it restarts from its logs as after a crash, instead of serving on crippled.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

log = structlog.get_logger("tidemark.cluster")

FATAL_EXIT_STATUS = 70  # EX_SOFTWARE: an internal error


def halt(exc: BaseException) -> None:
    """Stop the process now, non-zero (after the log is out)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(FATAL_EXIT_STATUS)


class BackgroundTasks:
    def __init__(self, on_fatal: Callable[[BaseException], None] = halt) -> None:
        self.on_fatal = on_fatal
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closing = False

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None or self._closing:
            return
        log.critical("cluster_task_died", task=task.get_name(), error=repr(exc), exc_info=exc)
        self.on_fatal(exc)

    async def cancel_all(self) -> None:
        self._closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
