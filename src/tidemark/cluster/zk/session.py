"""The broker's one ZooKeeper session (Kafka's zookeeper.connect, zookeeper.session.timeout.ms).

ZkSession owns the broker's only KazooClient; the cluster link's parts and the ZooKeeper offset
store are handed it. Blocking kazoo calls go through `call`: on the session's own bounded thread
pool (not asyncio's default executor, which the flusher and the cleaner share), each bounded by
a timeout (zookeeper.session.timeout.ms). A stalled ZooKeeper so parks at most these threads,
and a caller waiting past the timeout gets ZkCallTimeoutError, a failed ZooKeeper call, never a
hang: produce and fetch of partitions whose leadership does not change go on meanwhile.

The session also holds a lease (`may_lead`): whether this broker may still act as the leader of
what it leads. ZooKeeper cannot expire a session sooner than its timeout after it last heard from
the client, and another broker leads only once the controller saw the expiry, so a round trip
sent at t proves no other leader before t + timeout. The lease runs to t + 2/3 of it (ZooKeeper's
client read timeout: room for clocks and the controller's own delays), is renewed every 1/6 of
it by a thread of its own (a busy event loop does not lapse it), and is void at once when kazoo
reports the connection suspended or the session lost (its connection thread writes that here
directly, not through the event loop). A broker paused past the lease (SIGSTOP) so finds it
lapsed when it runs again, before kazoo learns anything, until a round trip sent after the pause
is answered. `on_fence` tells the loop each time the lease ends and is held again.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import collections
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException
from kazoo.retry import KazooRetry

log = structlog.get_logger("tidemark.cluster")

T = TypeVar("T")
DEFAULT_SESSION_TIMEOUT_MS = 18000  # Kafka's zookeeper.session.timeout.ms
# Threads for blocking kazoo calls: enough for the view's reads, an ISR write, the controller's
# events (one thread at most, SerialEvents) and a few admin requests at once; more callers queue
# (their wait counts against their timeout).
ZOOKEEPER_THREADS = 5
CONNECT_TIMEOUT_S = 30.0
LEASE_FRACTION = 2 / 3  # of the session timeout: how long a round trip keeps the lease
LEASE_RENEW_FRACTION = 1 / 6  # of the session timeout: how often the lease is renewed


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
        self.session_timeout_s = session_timeout_ms / 1000
        # The lease's clock (monotonic seconds); tests replace it to stand for a pause.
        self.monotonic: Callable[[], float] = time.monotonic
        # Written by kazoo's connection thread at each state change, read anywhere: whether the
        # connection is up, and a count of its interruptions (a renewal sent before one proves
        # nothing after it).
        self._live = False
        self._interruptions = 0
        # (until, the interruption count it was taken under): one tuple, written at once, so a
        # lease renewed as the connection drops belongs to the old connection
        self._lease: tuple[float, int] = (0.0, -1)
        self._fenced = True  # as last posted to on_fence's callbacks (by the lease's thread)
        self._on_fence: list[Callable[[bool], None]] = []
        self._lease_thread: threading.Thread | None = None
        self._lease_wake = threading.Event()  # a state change: look at the lease now
        self._closing = False
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
            self._live = True
            self._connected.set()
        self._lease_thread = threading.Thread(target=self._keep_lease, name="zookeeper-lease", daemon=True)
        self._lease_thread.start()

    async def call(self, function: Callable[..., T], *args: Any, timeout_s: float | None = None, **kwargs: Any) -> T:
        """`function(*args, **kwargs)` (blocking kazoo work) on the session's threads, within
        timeout_s (the call timeout by default): ZkCallTimeoutError past it."""
        timeout_s = self.call_timeout_s if timeout_s is None else timeout_s
        future = self.loop.run_in_executor(self._executor, functools.partial(function, *args, **kwargs))
        try:
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            # Our own deadline cancelled the wait (and with it the future); a TimeoutError the
            # call raised leaves it done, not cancelled. A bare TimeoutError would escape the
            # callers' `except KazooException` and end their task (the broker halts on it).
            if future.cancelled() or not future.done():
                raise ZkCallTimeoutError(
                    f"ZooKeeper call {getattr(function, '__qualname__', function)!s} did not complete "
                    f"within {timeout_s}s") from None
            raise

    def submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        """`function(*args)` on the session's threads, from any thread (the controller's events);
        RuntimeError once the session is closed."""
        return self._executor.submit(function, *args)

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def on_lost(self, callback: Callable[[], None]) -> None:
        """Call `callback()` on the event loop each time the session is lost (expired)."""
        self._on_lost.append(callback)

    # -- the lease ------------------------------------------------------------------------------

    @property
    def lease_s(self) -> float:
        return self.session_timeout_s * LEASE_FRACTION

    def may_lead(self) -> bool:
        """Whether this broker may act as the leader of what it leads: connected, and a round
        trip on this connection answered recently enough that no other broker can lead yet."""
        until, taken_under = self._lease
        return self._live and taken_under == self._interruptions and self.monotonic() < until

    def on_fence(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(fenced)` on the event loop each time the lease ends (True) and each
        time it is held again (False)."""
        self._on_fence.append(callback)

    def _keep_lease(self) -> None:
        """The lease's own thread (not the event loop: a busy loop must not lapse it, and a
        paused process finds it lapsed): a round trip every 1/6 of the session timeout; each
        answered one, sent while connected and not interrupted since, extends the lease to its
        send time plus the lease. Each time the lease ends or is held again the event loop is
        told, in order; a lease that lapsed unseen (a pause) is told ended before held again."""
        while not self._closing:
            if self._live:
                sent_at, interruptions = self.monotonic(), self._interruptions
                try:
                    self.client.exists_async("/").get(timeout=self.lease_s)
                except Exception as exc:  # noqa: BLE001 - any failure leaves the lease as it is
                    log.debug("zookeeper_lease_not_renewed", error=repr(exc))
                else:
                    if self._live and interruptions == self._interruptions and not self._closing:
                        self._post_fence()
                        until = self._lease[0] if self._lease[1] == interruptions else 0.0
                        self._lease = (max(until, sent_at + self.lease_s), interruptions)
            self._post_fence()
            until, _ = self._lease
            remaining = until - self.monotonic()
            interval = self.session_timeout_s * LEASE_RENEW_FRACTION
            self._lease_wake.wait(min(interval, remaining) if remaining > 0 else interval)
            self._lease_wake.clear()

    def _post_fence(self) -> None:
        """Tell the event loop if the lease ended or was held again since it last heard."""
        fenced = not self.may_lead()
        if fenced == self._fenced:
            return
        self._fenced = fenced
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fence_on_loop, fenced)

    def _fence_on_loop(self, fenced: bool) -> None:
        if self._closing:
            return
        if fenced:
            log.warning("zookeeper_lease_ended", connected=self._live)
        else:
            log.info("zookeeper_lease_held")
        for callback in list(self._on_fence):
            try:
                callback(fenced)
            except Exception:  # noqa: BLE001 - one listener's bug must not hide the others
                log.exception("zookeeper_lease_listener_failed")

    def _state_changed(self, state: str) -> None:  # kazoo's connection thread: must not block
        # The lease is void the moment kazoo knows: a request being answered on the event loop
        # meanwhile must not see it held.
        self._live = state == KazooState.CONNECTED
        if not self._live:
            self._interruptions += 1
        self._lease_wake.set()
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
        self._closing = True  # the lease's thread ends at its next look (it never holds the loop)
        self._live = False
        self._lease_wake.set()
        try:
            await self.call(self.client.stop, timeout_s=timeout_s)
            await self.call(self.client.close, timeout_s=timeout_s)
        except (ZkCallTimeoutError, KazooException) as exc:
            log.warning("zookeeper_session_close_failed", error=repr(exc))
        self._executor.shutdown(wait=False, cancel_futures=True)


class BoundedCalls:
    """A client's blocking calls for code already on a ZooKeeper thread (the controller's
    events), each bounded: the request is sent asynchronously and waited for at most
    `timeout_s`, past which ZkCallTimeoutError (kazoo sync calls wait for as long as ZooKeeper
    takes, or, while disconnected, for the reconnection)."""

    def __init__(self, client: KazooClient, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s

    def wait(self, result: Any, what: str = "call") -> Any:
        try:
            return result.get(timeout=self.timeout_s)
        except self.client.handler.timeout_exception:
            raise ZkCallTimeoutError(f"ZooKeeper {what} did not complete within {self.timeout_s}s") from None

    def get(self, path: str) -> tuple[bytes, Any]:
        return self.wait(self.client.get_async(path), f"get {path}")

    def exists(self, path: str) -> Any:
        return self.wait(self.client.exists_async(path), f"exists {path}")

    def get_children(self, path: str) -> list[str]:
        return self.wait(self.client.get_children_async(path), f"get_children {path}")

    def commit(self, transaction: Any) -> list[Any]:
        return self.wait(transaction.commit_async(), "multi")


class SerialEvents:
    """Functions run one at a time, in submission order, on a pool's threads (one thread at a
    time, only while there is work): Kafka's ControllerEventManager without a thread of its own."""

    def __init__(self, submit: Callable[[Callable[[], None]], Any]) -> None:
        self._submit = submit
        self._lock = threading.Lock()
        self._events: collections.deque[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._draining = False
        self._closed = False

    def submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        """RuntimeError once shut down."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the event queue is shut down")
            self._events.append((future, function, args))
            start, self._draining = not self._draining, True
        if start:
            try:
                self._submit(self._drain)
            except RuntimeError:  # the pool is closed
                with self._lock:
                    self._draining = False
                raise
        return future

    def shutdown(self) -> None:
        """Take no more; what is queued still runs."""
        with self._lock:
            self._closed = True

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._events:
                    self._draining = False
                    return
                future, function, args = self._events.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                future.set_exception(exc)
