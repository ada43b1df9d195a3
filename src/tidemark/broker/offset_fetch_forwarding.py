"""OffsetFetch forwarding (offsets.fetch.forward.enable, tidemark's own; off by default).

Kafka answers an OffsetFetch sent to a broker that does not coordinate the group with
NOT_COORDINATOR, and the client looks the coordinator up and asks again. With forwarding on, the
broker asks the coordinator itself (the leader of the group's offsets partition) and returns its
answer, so a client that reads offsets from any broker gets them in one round trip.

One pooled connection per destination broker, opened on first use and closed when the broker
stops, carries every forward to it at once (MultiplexedConnection: answers are matched to
requests by correlation id), so a forward never waits for another to be answered before it is
sent. Every forward is bounded by request.timeout.ms, connecting included. A forward that fails
(the coordinator down, moved, slow) is answered NOT_COORDINATOR, as without forwarding: the client
finds the coordinator itself. A connection that failed, or on which a forward timed out (the peer
answers in order, so what follows would wait behind it), is dropped and the next forward
connects afresh. A forwarded request is never forwarded again, so two brokers with different
views of the leader cannot bounce it between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import structlog

from tidemark.wire.client import MultiplexedConnection, Opener

log = structlog.get_logger("tidemark.offset_fetch_forwarding")

OFFSET_FETCH = 9
# The client id of forwarded requests: how a broker knows not to forward one again.
FORWARDED_CLIENT_ID = "tidemark-offset-fetch-forward"


class ForwardFailed(Exception):
    """The coordinator did not answer the forwarded request."""


class _Pooled:
    """One broker's connection, and the lock that makes concurrent first uses share one connect."""

    def __init__(self, address: tuple[str, int], opener: Opener | None = None) -> None:
        self.address = address
        self.opener = opener
        self.connecting = asyncio.Lock()
        self.connection: MultiplexedConnection | None = None

    async def connected(self, timeout_s: float) -> MultiplexedConnection:
        async with self.connecting:
            if self.connection is None or self.connection.broken:
                stale, self.connection = self.connection, None
                if stale is not None:
                    await stale.close()
                self.connection = await MultiplexedConnection.connect(*self.address, FORWARDED_CLIENT_ID, timeout_s,
                                                                 opener=self.opener)
            return self.connection


class OffsetFetchForwarder:
    def __init__(self, address_of: Callable[[int], tuple[str, int] | None], timeout_ms: int,
                 opener: Opener | None = None) -> None:
        self._address_of = address_of
        self._opener = opener  # a secured inter-broker listener's TLS and SASL
        self._timeout_s = timeout_ms / 1000
        self._pool: dict[int, _Pooled] = {}
        self._closed = False

    @staticmethod
    def is_forwarded(client_id: str | None) -> bool:
        return client_id == FORWARDED_CLIENT_ID

    async def forward(self, broker_id: int, version: int, body: Any) -> Any:
        """The response of broker `broker_id` to OffsetFetch `body` (a kio request entity) at
        `version`; ForwardFailed when it does not answer within request.timeout.ms."""
        address = self._address_of(broker_id)
        if address is None or self._closed:
            raise ForwardFailed(f"broker {broker_id} is not available")
        pooled = self._pool.get(broker_id)
        if pooled is None or pooled.address != address:  # new, or the broker came back elsewhere
            if pooled is not None:
                await self._drop(pooled, pooled.connection)
            pooled = self._pool[broker_id] = _Pooled(address, self._opener)
        connection = None
        try:
            async with asyncio.timeout(self._timeout_s):
                connection = await pooled.connected(self._timeout_s)
                return await connection.request(OFFSET_FETCH, version, body, self._timeout_s)
        except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            log.info("offset_fetch_forward_failed", broker=broker_id, error=repr(exc))
            if connection is not None:
                await self._drop(pooled, connection)
            raise ForwardFailed(str(exc)) from exc

    async def _drop(self, pooled: _Pooled, connection: MultiplexedConnection | None) -> None:
        """Close `connection` and forget it, unless the pool holds a newer one already."""
        if connection is None:
            return
        if pooled.connection is connection:
            pooled.connection = None
        await connection.close()

    async def close(self) -> None:
        """Close every pooled connection (the broker stops); later forwards fail at once."""
        self._closed = True
        pooled, self._pool = list(self._pool.values()), {}
        await asyncio.gather(*(self._drop(p, p.connection) for p in pooled))
