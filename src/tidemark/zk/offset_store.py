"""ZookeeperOffsetManager: consumer offsets as znodes, for asyncio callers.

kazoo runs its own connection thread; every call here uses kazoo's asynchronous API and is
awaited through a future the connection thread settles with call_soon_threadsafe, so the event
loop never blocks on ZooKeeper. Each call is bounded by the caller's timeout: a ZooKeeper that
is down or hung (no answer at all) makes the call raise ZookeeperUnavailable when it runs out.

A commit of several partitions is one ZooKeeper multi (transaction): all of its znodes change
or none does, so a commit reported as failed never left part of itself behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, RolledBackError
from kazoo.retry import KazooRetry

from tidemark.zk import paths

T = TypeVar("T")
NO_OFFSET = -1
MAX_COMMIT_ATTEMPTS = 3  # a commit retried after a znode it expected was created/deleted meanwhile


class ZookeeperUnavailable(Exception):
    """ZooKeeper did not answer in time, or the session is gone."""


class ZookeeperOffsetManager:
    """Reads and writes /consumers/[group]/offsets/[topic]/[partition]. Metadata is not kept
    (Kafka's ZooKeeper storage kept only the offset)."""

    def __init__(self, connect: str, session_timeout_ms: int, client: KazooClient | None = None) -> None:
        self.connect = connect
        # The broker hands its own session's client (started and closed by its owner); the CLI
        # has the store open one of its own. Either reconnects forever in the background;
        # requests meanwhile fail at their own timeout.
        self._owns_client = client is None
        self.client = client if client is not None else KazooClient(
            hosts=connect, timeout=session_timeout_ms / 1000,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connected: asyncio.Event | None = None
        self._existing: set[str] = set()  # znodes seen to exist: committed to with set_data

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start connecting (in kazoo's thread); returns at once. Call from the event loop."""
        self._loop = asyncio.get_running_loop()
        self._connected = asyncio.Event()
        self.client.add_listener(self._state_changed)
        if not self._owns_client:
            if self.client.connected:
                self._connected.set()
            return
        self.client.start_async()

    def close(self) -> None:
        """Blocking when the store owns its client (joins kazoo's threads); a shared session is
        left to its owner."""
        self.client.remove_listener(self._state_changed)
        if self._owns_client:
            self.client.stop()
            self.client.close()

    def _state_changed(self, state: str) -> None:  # kazoo's thread
        loop, connected = self._loop, self._connected
        if loop is None or connected is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(connected.set if state == KazooState.CONNECTED else connected.clear)
        if state == KazooState.LOST:
            loop.call_soon_threadsafe(self._existing.clear)  # a new session: learn again

    # -- the two operations -----------------------------------------------------------------

    async def commit(self, group_id: str, offsets: dict[tuple[str, int], int], timeout_s: float) -> None:
        """Write every offset, atomically; ZookeeperUnavailable when not done within timeout_s."""
        if offsets:
            await self._bounded(timeout_s, lambda: self._commit(group_id, offsets))

    async def fetch(self, group_id: str, wanted: list[tuple[str, list[int]]] | None,
                    timeout_s: float) -> dict[tuple[str, int], int]:
        """The committed offset of each wanted partition (NO_OFFSET where there is none), or of
        every partition the group has an offset for when wanted is None."""
        return await self._bounded(timeout_s, lambda: self._fetch(group_id, wanted))

    async def groups(self, timeout_s: float) -> list[str]:
        """Every group with a znode under /consumers."""
        return sorted(await self._bounded(timeout_s, lambda: self._children(paths.CONSUMERS)))

    async def live_members(self, group_id: str, timeout_s: float) -> list[str]:
        """The consumer ids registered (ephemeral) under /consumers/[group]/ids."""
        return sorted(await self._bounded(timeout_s, lambda: self._children(paths.ids_path(group_id))))

    async def owners(self, group_id: str, timeout_s: float) -> dict[tuple[str, int], str]:
        """/consumers/[group]/owners: (topic, partition) -> the owning consumer thread id."""
        return await self._bounded(timeout_s, lambda: self._owners(group_id))

    # -- internals --------------------------------------------------------------------------

    async def _bounded(self, timeout_s: float, operation: Callable[[], Awaitable[T]]) -> T:
        """Wait for a connected session, then run the operation, all within timeout_s; a timeout
        or a ZooKeeper error becomes ZookeeperUnavailable."""
        if self._connected is None:
            self.start()
        assert self._connected is not None
        try:
            async with asyncio.timeout(timeout_s):
                await self._connected.wait()
                return await operation()
        except TimeoutError:
            raise ZookeeperUnavailable(f"no answer from ZooKeeper {self.connect} in {timeout_s}s") from None
        except KazooException as exc:
            raise ZookeeperUnavailable(f"ZooKeeper {self.connect}: {exc!r}") from exc

    async def _commit(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        for _ in range(MAX_COMMIT_ATTEMPTS):
            if await self._commit_once(group_id, offsets):
                return
        raise ZookeeperUnavailable(f"commit of {group_id} kept conflicting with concurrent changes")

    async def _fetch(self, group_id: str, wanted: list[tuple[str, list[int]]] | None) -> dict[tuple[str, int], int]:
        if wanted is None:
            wanted = await self._all_partitions(group_id)
        keys = [(topic, partition) for topic, partitions in wanted for partition in partitions]
        values = await asyncio.gather(*(self._get(paths.offsets_path(group_id, t, p)) for t, p in keys))
        return {key: NO_OFFSET if data is None else paths.decode_offset(data) for key, data in zip(keys, values)}

    async def _commit_once(self, group_id: str, offsets: dict[tuple[str, int], int]) -> bool:
        """One transaction; False when a znode's existence was not what we believed (retry)."""
        znodes = {paths.offsets_path(group_id, t, p): paths.encode_offset(o) for (t, p), o in offsets.items()}
        unknown = [path for path in znodes if path not in self._existing]
        if unknown:
            parents = {path.rsplit("/", 1)[0] for path in unknown}
            await asyncio.gather(*(self._call(self.client.ensure_path_async(parent)) for parent in parents))
            found = await asyncio.gather(*(self._call(self.client.exists_async(path)) for path in unknown))
            self._existing.update(path for path, stat in zip(unknown, found) if stat is not None)
        transaction = self.client.transaction()
        for path, data in znodes.items():
            if path in self._existing:
                transaction.set_data(path, data)
            else:
                transaction.create(path, data)
        results = await self._call(transaction.commit_async())
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            self._existing.update(znodes)
            return True
        if not all(isinstance(f, (NodeExistsError, NoNodeError)) for f in failures):
            raise ZookeeperUnavailable(f"commit failed: {failures[0]!r}")
        self._existing.difference_update(znodes)  # ask again on the next attempt
        return False

    async def _all_partitions(self, group_id: str) -> list[tuple[str, list[int]]]:
        topics = sorted(await self._children(paths.offsets_path(group_id)))
        children = await asyncio.gather(*(self._children(paths.offsets_path(group_id, t)) for t in topics))
        return [(topic, sorted(int(c) for c in names if c.isdigit())) for topic, names in zip(topics, children)]

    async def _owners(self, group_id: str) -> dict[tuple[str, int], str]:
        topics = await self._children(paths.owners_path(group_id))
        keys = [(t, int(p)) for t in topics for p in await self._children(paths.owners_path(group_id, t)) if p.isdigit()]
        values = await asyncio.gather(*(self._get(paths.owners_path(group_id, t, p)) for t, p in keys))
        return {key: data.decode() for key, data in zip(keys, values) if data is not None}

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._call(self.client.get_children_async(path))
        except NoNodeError:
            return []

    async def _get(self, path: str) -> bytes | None:
        try:
            data, _ = await self._call(self.client.get_async(path))
        except NoNodeError:
            return None
        return data

    async def _call(self, async_result: Any) -> Any:
        """Await a kazoo IAsyncResult (settled in kazoo's thread)."""
        loop = self._loop
        assert loop is not None
        future = loop.create_future()

        def settled(result: Any) -> None:  # kazoo's thread
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, future, result)

        async_result.rawlink(settled)
        return await future


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():  # the caller gave up (timeout)
        return
    if result.successful():
        future.set_result(result.get_nowait())
    else:
        future.set_exception(result.exception)


def sorted_partitions(offsets: Iterable[tuple[str, int]]) -> list[tuple[str, list[int]]]:
    """(topic, partition) pairs grouped by topic, both sorted."""
    grouped: dict[str, list[int]] = {}
    for topic, partition in sorted(offsets):
        grouped.setdefault(topic, []).append(partition)
    return list(grouped.items())
