"""The OffsetFetch forwarder's connection pool: a coordinator that drops the connection fails the
forward (answered NOT_COORDINATOR by the handler) and the next forward connects afresh; after the
broker stops, nothing is forwarded; forwards to one coordinator share its connection at once."""

from __future__ import annotations

import asyncio
import io
import struct

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from tidemark.broker.offset_fetch_forwarding import ForwardFailed, OffsetFetchForwarder
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

WAIT_S = 60.0  # a hang guard


def _body():
    return build(load_request_schema(ApiKey.OFFSET_FETCH, 8), {"groups": [{"group_id": "g", "topics": None}], "require_stable": False})


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


class _StalledPeer:
    """A coordinator that holds the answer to its first OffsetFetch until released and answers
    the others at once: each answer names the group its request asked for, offset = its order."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held: list[asyncio.Task[None]] = []
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                request_cls = load_request_schema(ApiKey.OFFSET_FETCH, 8)
                header, offset = entity_reader(request_cls.__header_schema__)(frame, 0)
                body, _ = entity_reader(request_cls)(frame, offset)
                group_id = body.groups[0].group_id
                self.requests.append(group_id)
                self.arrived.set()
                answer = _answer(header.correlation_id, group_id, len(self.requests))
                if len(self.requests) == 1:
                    held.append(asyncio.create_task(self._answer_when_released(writer, answer)))
                else:
                    writer.write(answer)
        except asyncio.IncompleteReadError:
            writer.close()

    async def _answer_when_released(self, writer: asyncio.StreamWriter, answer: bytes) -> None:
        await self.release.wait()
        writer.write(answer)


def _answer(correlation_id: int, group_id: str, offset: int) -> bytes:
    response_cls = load_response_schema(ApiKey.OFFSET_FETCH, 8)
    buffer = io.BytesIO()
    entity_writer(response_cls.__header_schema__)(buffer, build(response_cls.__header_schema__,
                                                                 {"correlation_id": correlation_id}))
    entity_writer(response_cls)(buffer, build(response_cls, {"throttle_time": 0, "groups": [
        {"group_id": group_id, "error_code": 0, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1, "metadata": "",
             "error_code": 0}]}]}]}))
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def _group_body(group_id: str):
    return build(load_request_schema(ApiKey.OFFSET_FETCH, 8), {"groups": [{"group_id": group_id, "topics": None}],
                                             "require_stable": False})


def test_a_held_forward_does_not_hold_the_next_one_on_the_same_connection() -> None:
    """Two forwards to one coordinator in flight on one connection: the first is held by the
    peer, the second is sent and answered meanwhile; each gets its own answer (by correlation id)."""
    async def scenario() -> None:
        peer = _StalledPeer()
        server = await asyncio.start_server(peer.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        forwarder = OffsetFetchForwarder(lambda broker_id: ("127.0.0.1", port), 120_000)
        try:
            async with asyncio.timeout(WAIT_S):  # a hang guard
                slow = asyncio.create_task(forwarder.forward(2, 8, _group_body("slow")))
                while not peer.requests:
                    await peer.arrived.wait()
                    peer.arrived.clear()
                fast = await forwarder.forward(2, 8, _group_body("fast"))
                assert not slow.done()
                assert [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in fast.groups] == [("fast", 2)]
                peer.release.set()
                held = await slow
                assert [(g.group_id, g.topics[0].partitions[0].committed_offset) for g in held.groups] == [("slow", 1)]
                assert peer.requests == ["slow", "fast"]
        finally:
            await forwarder.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
