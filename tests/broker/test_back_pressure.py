"""A client that pipelines fetches and never reads holds a bounded amount of the broker's memory:
its connection is not read further, and other connections are still served."""

from __future__ import annotations

import asyncio
import socket
import struct

from tests.integration.raw import decode_response, encode_request, fetch_body
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import MAX_UNSENT_BYTES_PER_CONNECTION, Broker, Connection
from tidemark.records.batch import build_batch

PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18
FETCHES = 6
BATCH_VALUE = 1_000_000
# One response is more than the bound, even after the kernel's socket buffers took their share.
BATCHES = (MAX_UNSENT_BYTES_PER_CONNECTION + (8 << 20)) // BATCH_VALUE


async def _connect(port: int, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


async def _send(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: dict) -> None:
    payload = encode_request(api_key, version, correlation_id, body)
    await asyncio.get_running_loop().sock_sendall(sock, struct.pack(">i", len(payload)) + payload)


async def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    loop, data = asyncio.get_running_loop(), bytearray()
    while len(data) < n:
        chunk = await loop.sock_recv(sock, min(n - len(data), 1 << 20))
        assert chunk, "connection closed by the broker"
        data += chunk
    return bytes(data)


async def _response(sock: socket.socket, api_key: int, version: int):
    size = struct.unpack(">i", await _recv_exactly(sock, 4))[0]
    return decode_response(api_key, version, await _recv_exactly(sock, size))


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def test_pipelined_fetches_from_a_client_that_does_not_read(tmp_path):
    async def scenario() -> None:
        broker = Broker(BrokerConfig({"auto.create.topics.enable": "false"}), tmp_path, port=0)
        await broker.start()
        try:
            broker.replicas.create_topic("big", 1, {})
            producer = await _connect(broker.port)
            for i in range(BATCHES):
                records = build_batch([(None, b"v" * BATCH_VALUE, (), 1)])
                await _send(producer, PRODUCE, 9, i, {"acks": -1, "timeout": 60000, "topic_data": [
                    {"name": "big", "partition_data": [{"index": 0, "records": records}]}]})
                _, produced = await _response(producer, PRODUCE, 9)
                assert produced.responses[0].partition_responses[0].error_code == 0
            log_bytes = len(records) * BATCHES

            slow = await _connect(broker.port, receive_buffer=4096)
            for i in range(FETCHES):
                await _send(slow, FETCH, 11, i, fetch_body([("big", 0, 0, 64 << 20)], max_bytes=64 << 20))
            await _until(lambda: any(c.peer == slow.getsockname() for c in broker.connections))
            (connection,) = [c for c in broker.connections if c.peer == slow.getsockname()]
            # The broker stops reading the slow client once a response is in its transport and
            # the rest wait: one response is held, not six.
            await _until(lambda: connection.reading_paused and not connection._pending)
            assert len(connection._waiting) == FETCHES - 1
            held = connection._held + connection.transport.get_write_buffer_size()
            assert MAX_UNSENT_BYTES_PER_CONNECTION <= held < log_bytes + (1 << 16)

            # Everyone else is still served.
            other = await _connect(broker.port)
            await _send(other, METADATA, 12, 99, {"topics": None, "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
            correlation_id, metadata = await _response(other, METADATA, 12)
            assert correlation_id == 99 and [b.node_id for b in metadata.brokers] == [0]

            # Once the client reads, every fetch is answered, in order, in full.
            for i in range(FETCHES):
                correlation_id, fetched = await _response(slow, FETCH, 11)
                assert correlation_id == i
                assert len(fetched.responses[0].partitions[0].records) == log_bytes
            assert not connection.reading_paused
            for sock in (producer, slow, other):
                sock.close()
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=120))


def test_a_frame_is_counted_before_the_writer_takes_it(tmp_path, monkeypatch):
    """A handler that never waits ends before the connection's writer wakes, and the writer
    takes its frame at once: the frame must already count among the bytes held then. (Counted
    only by a later callback, the writer's subtraction left the count a frame below what the
    connection holds, loosening its bound by that much until the callback ran.)"""
    held_at_write: list[int] = []
    write = Connection._write

    def recording_write(self, frame):
        held_at_write.append(self._held)
        write(self, frame)

    monkeypatch.setattr(Connection, "_write", recording_write)

    async def scenario() -> None:
        broker = Broker(BrokerConfig({}), tmp_path, port=0)
        await broker.start()
        try:
            client = await _connect(broker.port)
            await _send(client, API_VERSIONS, 3, 1, {"client_software_name": "t", "client_software_version": "1"})
            correlation_id, _ = await _response(client, API_VERSIONS, 3)
            assert correlation_id == 1
            client.close()
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert held_at_write == [0]
