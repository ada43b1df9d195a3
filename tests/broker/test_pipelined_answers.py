"""A connection's pipelined requests are answered in request order whichever of them is ready
first; the bytes the answers hold are counted until written."""

from __future__ import annotations

import asyncio
import socket
import struct

from tests.integration.raw import decode_response, encode_request
from tidemark.broker.apis import api_versions
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import HANDLERS, Broker, Connection
from tidemark.wire.api_keys import ApiKey

VERSION = 3
BODY = {"client_software_name": "t", "client_software_version": "1"}


async def _connect(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _send_all(sock: socket.socket, correlation_ids: list[int]) -> None:
    """The requests in one send: the broker reads them together."""
    data = b""
    for correlation_id in correlation_ids:
        payload = encode_request(ApiKey.API_VERSIONS, VERSION, correlation_id, BODY)
        data += struct.pack(">i", len(payload)) + payload
    await asyncio.get_running_loop().sock_sendall(sock, data)


async def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    loop, data = asyncio.get_running_loop(), bytearray()
    while len(data) < n:
        chunk = await loop.sock_recv(sock, n - len(data))
        assert chunk, "connection closed by the broker"
        data += chunk
    return bytes(data)


async def _answer(sock: socket.socket) -> tuple[int, object]:
    size = struct.unpack(">i", await _recv_exactly(sock, 4))[0]
    return decode_response(ApiKey.API_VERSIONS, VERSION, await _recv_exactly(sock, size))


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


class _Gated:
    """ApiVersions whose first request waits for the test's gate; the rest answer at once."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0

    async def handle(self, ctx, request):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == 1:
            await self.gate.wait()
        return await api_versions.handle(ctx, request)


def _scenario(tmp_path, monkeypatch, body) -> list[int]:  # type: ignore[no-untyped-def]
    """Run body(broker, gated, client) against a broker whose ApiVersions is gated; returns the
    number of bytes each write to the socket carried."""
    writes: list[int] = []
    write = Connection._write

    def recording_write(self, frame):  # type: ignore[no-untyped-def]
        writes.append(len(frame))
        write(self, frame)

    monkeypatch.setattr(Connection, "_write", recording_write)

    async def run() -> None:
        gated = _Gated()
        handlers = {**HANDLERS, ApiKey.API_VERSIONS: (gated.handle, 0)}
        broker = Broker(BrokerConfig({}), tmp_path, port=0, handlers=handlers)
        await broker.start()
        try:
            client = await _connect(broker.port)
            try:
                await body(broker, gated, client)
            finally:
                client.close()
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(run(), timeout=60))
    return writes


def test_answers_ready_before_an_earlier_one_wait_for_it_counted_as_held(tmp_path, monkeypatch):
    frames: list[int] = []

    async def body(broker, gated, client):  # type: ignore[no-untyped-def]
        await _send_all(client, [1, 2, 3])
        await _until(lambda: len(broker.connections) == 1)
        (connection,) = broker.connections
        # The later two are answered while the first waits: nothing is written yet, and their
        # frames count among the bytes the connection holds.
        await _until(lambda: len(connection._pending) == 3 and connection._pending[1].done()
                     and connection._pending[2].done())
        assert not connection._pending[0].done()
        held = [len(connection._pending[i].result()) for i in (1, 2)]
        assert connection._held == sum(held)
        gated.gate.set()
        answers = [await _answer(client) for _ in range(3)]
        assert [correlation_id for correlation_id, _ in answers] == [1, 2, 3]
        assert all(answer.error_code == 0 for _, answer in answers)
        assert connection._held == 0 and not connection._pending
        frames.extend(held)

    writes = _scenario(tmp_path, monkeypatch, body)
    assert writes[1:] == frames  # each answer written once, in order, the waiting one first


def test_answers_ready_one_by_one_are_written_as_they_come_in_order(tmp_path, monkeypatch):
    async def body(broker, gated, client):  # type: ignore[no-untyped-def]
        gated.gate.set()  # nothing waits: each answer is written once its request is handled
        for correlation_id in (1, 2, 3):
            await _send_all(client, [correlation_id])
            got, answer = await _answer(client)
            assert got == correlation_id and answer.error_code == 0
        (connection,) = broker.connections
        assert connection._held == 0 and not connection._pending

    assert len(_scenario(tmp_path, monkeypatch, body)) == 3


def test_end_of_input_closes_after_every_answer_before_it(tmp_path, monkeypatch):
    async def body(broker, gated, client):  # type: ignore[no-untyped-def]
        await _send_all(client, [1, 2])
        client.shutdown(socket.SHUT_WR)  # the client is done asking; the answers still come
        await _until(lambda: gated.calls == 2)
        gated.gate.set()
        assert [(await _answer(client))[0] for _ in range(2)] == [1, 2]
        assert await asyncio.get_running_loop().sock_recv(client, 1) == b""  # then the broker closes

    _scenario(tmp_path, monkeypatch, body)
