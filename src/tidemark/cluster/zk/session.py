"""The broker's one ZooKeeper session (Kafka's zookeeper.connect, zookeeper.session.timeout.ms).

ZkSession owns the broker's only KazooClient; the cluster link's parts and the ZooKeeper offset
store are handed it. Blocking kazoo calls go through `call`: on the session's own bounded thread
pool (not asyncio's default executor, which the flusher and the cleaner share), each bounded by
a timeout (zookeeper.session.timeout.ms). A stalled ZooKeeper so parks at most these threads,
and a caller waiting past the timeout gets ZkCallTimeoutError, a failed ZooKeeper call, never a
hang: produce and fetch of partitions whose leadership does not change go on meanwhile.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.retry import KazooRetry

log = structlog.get_logger("tidemark.cluster")

T = TypeVar("T")
DEFAULT_SESSION_TIMEOUT_MS = 18000  # Kafka's zookeeper.session.timeout.ms
# Threads for blocking kazoo calls: enough for the view's reads, an ISR write and a few admin
# requests at once; more callers queue (their wait counts against their timeout).
ZOOKEEPER_THREADS = 4
CONNECT_TIMEOUT_S = 30.0


class ZkCallTimeoutError(KazooException, TimeoutError):
    """A ZooKeeper call that did not complete within its timeout (ZooKeeper stalled, or every
    ZooKeeper thread parked on one). Its caller treats it as any failed ZooKeeper call."""


def connect(zookeeper_connect: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
            timeout_s: float = CONNECT_TIMEOUT_S) -> KazooClient:
    """A started client (blocking until connected or timeout_s). It reconnects forever in the
    background and opens a new session by itself after an expiry."""
    client = new_client(zookeeper_connect, session_timeout_ms)
    client.start(timeout=timeout_s)
    return client


def new_client(zookeeper_connect: str, session_timeout_ms: int) -> KazooClient:
    return KazooClient(hosts=zookeeper_connect, timeout=session_timeout_ms / 1000,
                       connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))


class ZkSession:
    """One broker's ZooKeeper session: its client, its thread pool, and its state as the event
    loop sees it (connected or not, lost: the session expired and kazoo opened a new one)."""

    def __init__(self, zookeeper_connect: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 call_timeout_ms: int | None = None, threads: int = ZOOKEEPER_THREADS) -> None:
        self.connect_string = zookeeper_connect
        self.call_timeout_s = (call_timeout_ms or session_timeout_ms) / 1000
        self.client = new_client(zookeeper_connect, session_timeout_ms)
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="zookeeper")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected = asyncio.Event()
        self._on_lost: list[Callable[[], None]] = []
        self.expiries = 0  # sessions lost so far (status, tests)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the session is not started"
        return self._loop

    async def start(self, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        """Connect (the first session); kazoo reconnects and renews the session by itself later."""
        self._loop = asyncio.get_running_loop()
        self.client.add_listener(self._state_changed)
        await self.call(self.client.start, timeout_s, timeout_s=timeout_s + 1)
        if self.client.connected:
            self._connected.set()

    async def call(self, function: Callable[..., T], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> T:
        """`function(*args, **kwargs)` (blocking kazoo work) on the session's threads, within
        timeout_s (the call timeout by default): ZkCallTimeoutError past it."""
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        future = self.loop.run_in_executor(self._executor, functools.partial(function, *args, **kwargs))
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            if not future.done():  # our own deadline, not a TimeoutError the call raised
                raise ZkCallTimeoutError(
                    f"ZooKeeper call {getattr(function, '__qualname__', function)!s} did not complete "
                    f"within {timeout_s}s") from None
            raise

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback()` on the event loop each time the session is lost (expired)."""
        self._on_lost.append(callback)

    def _state_changed(self, state: str) -> None:  # kazoo's connection thread: must not block
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._state_on_loop, state)

    def _state_on_loop(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self._connected.set()
            return
        self._connected.clear()
        if state == KazooState.LOST:
            self.expiries += 1
            log.warning("zookeeper_session_lost", expiries=self.expiries)
            for callback in list(self._on_lost):
                try:
                    callback()
                except Exception:  # noqa: BLE001 - one listener's bug must not hide the others
                    log.exception("zookeeper_session_lost_listener_failed")

    async def close(self, timeout_s: float = 10.0) -> None:
        """End the session (its ephemeral znodes go at once) and the threads; bounded: a thread
        parked on a stalled ZooKeeper is left behind, never waited for."""
        self.client.remove_listener(self._state_changed)
        try:
            await self.call(self.client.stop, timeout_s=timeout_s)
            await self.call(self.client.close, timeout_s=timeout_s)
        except (ZkCallTimeoutError, KazooException) as exc:
            log.warning("zookeeper_session_close_failed", error=repr(exc))
        self._executor.shutdown(wait=False, cancel_futures=True)
