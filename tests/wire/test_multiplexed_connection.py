"""MultiplexedConnection: answers go to their requests by correlation id; the late answer to a
request that gave up is dropped without disturbing the next; a closed peer fails every waiter."""

from __future__ import annotations

import asyncio

import pytest

from tests.broker.test_offset_fetch_forwarding import WAIT_S, _group_body, _StalledPeer
from tidemark.wire.client import MultiplexedConnection
from tidemark.wire.api_keys import ApiKey


def _offsets(response) -> list[tuple[str, int]]:
    return [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in response.groups]


def test_a_late_answer_is_dropped_and_the_next_request_gets_its_own() -> None:
    async def scenario() -> None:
        peer = _StalledPeer()
        server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await MultiplexedConnection.connect("127.0.0.1", port, "test", WAIT_S)
        try:
            with pytest.raises(TimeoutError):  # the peer holds this answer until released
                await connection.request(ApiKey.OFFSET_FETCH, 8, _group_body("given-up"), 0.2)
            peer.release.set()  # the held answer arrives now, for nobody
            assert _offsets(await connection.request(ApiKey.OFFSET_FETCH, 8, _group_body("next"), WAIT_S)) == [("next", 2)]
            assert not connection.broken
        finally:
            await connection.close()
            server.close()
            await server.wait_closed()
        assert connection.broken
        with pytest.raises(ConnectionError):
            await connection.request(ApiKey.OFFSET_FETCH, 8, _group_body("after-close"), WAIT_S)

    asyncio.run(scenario())


def test_a_peer_that_hangs_up_fails_every_request_in_flight() -> None:
    async def scenario() -> None:
        requests = asyncio.Queue()

        async def read_two_then_hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for _ in range(2):
                size = int.from_bytes(await reader.readexactly(4), "big")
                await requests.put(await reader.readexactly(size))
            writer.close()

        server = await asyncio.start_server(read_two_then_hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connection = await MultiplexedConnection.connect("127.0.0.1", port, "test", WAIT_S)
        try:
            async with asyncio.timeout(WAIT_S):  # a hang guard
                both = [asyncio.create_task(connection.request(ApiKey.OFFSET_FETCH, 8, _group_body(g), WAIT_S)) for g in ("a", "b")]
                results = await asyncio.gather(*both, return_exceptions=True)
            assert [type(r) for r in results] == [ConnectionError, ConnectionError]
            assert requests.qsize() == 2 and connection.broken
        finally:
            await connection.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
