"""A produce's records reach the log as a view of the connection's receive buffer (no copy on
the way), and whatever keeps such a view still reads the same bytes after the connection has
received more requests."""

from __future__ import annotations

import asyncio
import socket
import struct

from tests.integration.raw import decode_response, encode_request, fetch_body
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.log.unified_log import UnifiedLog
from tidemark.records import decode_records
from tidemark.records.batch import build_batch, iter_batches

PRODUCE, FETCH, METADATA = 0, 1, 3


async def _send(sock: socket.socket, api_key: int, version: int, correlation_id: int, body: dict) -> None:
    payload = encode_request(api_key, version, correlation_id, body)
    await asyncio.get_running_loop().sock_sendall(sock, struct.pack(">i", len(payload)) + payload)


async def _response(sock: socket.socket, api_key: int, version: int):
    loop = asyncio.get_running_loop()

    async def exactly(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = await loop.sock_recv(sock, n - len(data))
            assert chunk, "connection closed by the broker"
            data += chunk
        return bytes(data)

    size = struct.unpack(">i", await exactly(4))[0]
    return decode_response(api_key, version, await exactly(size))


def test_produced_records_are_appended_from_the_receive_buffer_and_stay_intact(tmp_path, monkeypatch):
    appended = []  # (records as the log got them, the receive buffer then, their bytes once written)
    append = UnifiedLog.append
    brokers = []

    def recording_append(self, records, **kwargs):
        info = append(self, records, **kwargs)
        if self.directory.name == "t-0":
            (connection,) = brokers[0].connections
            appended.append((records, connection.decoder._buffer, bytes(records)))
        return info

    monkeypatch.setattr(UnifiedLog, "append", recording_append)
    values = [bytes([65 + i]) * 50_000 for i in range(4)]

    async def scenario() -> None:
        broker = Broker(BrokerConfig({"auto.create.topics.enable": "false"}), tmp_path, port=0)
        brokers.append(broker)
        await broker.start()
        try:
            broker.replicas.create_topic("t", 1, {})
            loop = asyncio.get_running_loop()
            client = socket.socket()
            client.setblocking(False)
            await loop.sock_connect(client, ("127.0.0.1", broker.port))
            for i, value in enumerate(values):  # acks=-1: the fetch below reads under the high watermark
                await _send(client, PRODUCE, 9, i, {"acks": -1, "timeout": 30000, "topic_data": [
                    {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(b"k", value, (), 1)])}]}]})
                _, produced = await _response(client, PRODUCE, 9)
                assert produced.responses[0].partition_responses[0].base_offset == i
                await _send(client, METADATA, 12, 100 + i, {"topics": None, "allow_auto_topic_creation": False,
                                                            "include_topic_authorized_operations": False})
                await _response(client, METADATA, 12)
            await _send(client, FETCH, 11, 200, fetch_body([("t", 0, 0, 1 << 20)], max_bytes=1 << 20))
            _, fetched = await _response(client, FETCH, 11)
            records = fetched.responses[0].partitions[0].records
            got = [(r.offset, r.value) for _, h in iter_batches(records) for r in decode_records(records, _)]
            assert got == list(enumerate(values))
            client.close()
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert len(appended) == len(values)
    for records, receive_buffer, written in appended:
        # The very memory the connection received into, not a copy of it...
        assert isinstance(records, memoryview) and records.obj is receive_buffer
        # ...and no later request was received over it while it is kept.
        assert bytes(records) == written
