"""The OffsetFetch forwarder's connection pool: a coordinator that drops the connection fails the
forward (answered NOT_COORDINATOR by the handler) and the next forward connects afresh; after the
broker stops, nothing is forwarded."""

from __future__ import annotations

import asyncio

import pytest
from kio.index import load_request_schema

from tidemark.broker.offset_fetch_forwarding import ForwardFailed, OffsetFetchForwarder
from tidemark.wire.build import build


def _body():
    return build(load_request_schema(9, 8), {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})


def test_a_dropped_connection_fails_the_forward_and_the_next_one_reconnects() -> None:
    async def scenario() -> None:
        accepted = 0

        async def hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        forwarder = OffsetFetchForwarder(lambda broker_id: ("127.0.0.1", port) if broker_id == 2 else None, 30_000)
        try:
            for expected in (1, 2):
                with pytest.raises(ForwardFailed):
                    await forwarder.forward(2, 8, _body())
                assert accepted == expected
            with pytest.raises(ForwardFailed):  # a broker the cluster does not know
                await forwarder.forward(3, 8, _body())
            await forwarder.close()
            with pytest.raises(ForwardFailed):
                await forwarder.forward(2, 8, _body())
            assert accepted == 2  # stopped: not even a connection
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
