"""A minimal raw Kafka-protocol client for tests that need exact requests and error codes."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

from tidemark.wire import client as wire_client
from tidemark.wire.client import decode_response  # noqa: F401 - tests import it from here
from tidemark.wire.api_keys import ApiKey

RECV_TIMEOUT_S = 15.0


def encode_request(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """A request's payload (header and body), without the size prefix."""
    return wire_client.encode_request(api_key, version, correlation_id, body, client_id="raw-test")


def fetch_body(wanted: list[tuple[str, int, int, int]], max_wait_ms: int = 0, min_bytes: int = 0,
               max_bytes: int = 1 << 20) -> dict[str, Any]:
    """Fetch v11 of (topic, partition, offset, partition_max_bytes)."""
    return {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": p, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": limit}]}
                       for topic, p, offset, limit in wanted],
            "forgotten_topics_data": [], "rack_id": ""}


class AsyncRawClient:
    """RawClient for tests whose broker runs in the test's own event loop: a request can be sent
    now and its response awaited later."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    @classmethod
    async def connect(cls, port: int) -> AsyncRawClient:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        self.correlation_id += 1
        payload = encode_request(api_key, version, self.correlation_id, body)
        self.writer.write(struct.pack(">i", len(payload)) + payload)
        await self.writer.drain()
        return self.correlation_id

    async def receive(self, api_key: int, version: int, correlation_id: int) -> Any:
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        got, body = decode_response(api_key, version, await self.reader.readexactly(size))
        assert got == correlation_id
        return body

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return await self.receive(api_key, version, await self.send(api_key, version, body))

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class RawClient:
    def __init__(self, bootstrap: str, source_host: str | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        source = (source_host, 0) if source_host else None
        self.sock = socket.create_connection((host, int(port)), timeout=RECV_TIMEOUT_S, source_address=source)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks += chunk
        return bytes(chunks)

    def encode(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation_id += 1
        return encode_request(api_key, version, self.correlation_id, body)

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send_frame(self.encode(api_key, version, body))
        return self.read_response(api_key, version)

    def read_response(self, api_key: int, version: int) -> Any:
        correlation_id, body = decode_response(api_key, version, self.recv_frame())
        assert correlation_id == self.correlation_id
        return body

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (reads EOF within the timeout)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    # -- the requests most tests need, at one version each -----------------------------------

    def create_topic(self, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
                     replication_factor: int = 1) -> Any:
        """CreateTopics v7; returns the topic's result (error_code, ...)."""
        response = self.request(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": partitions,
            "replication_factor": replication_factor, "assignments": [],
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout": 10000, "validate_only": False})
        return response.topics[0]

    def produce(self, topic: str, records: bytes, acks: int = -1, partition: int = 0) -> Any:
        """Produce v9 of one partition's records; returns its partition response."""
        response = self.request(ApiKey.PRODUCE, 9, {"acks": acks, "timeout": 10000, "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
        return response.responses[0].partition_responses[0]

    def list_offset(self, topic: str, timestamp: int, partition: int = 0) -> Any:
        """ListOffsets v7 for one partition (-1 latest, -2 earliest, -3 max timestamp)."""
        response = self.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp,
                                            "current_leader_epoch": -1}]}]})
        return response.topics[0].partitions[0]

    def fetch(self, wanted: list[tuple[str, int, int, int]], max_wait_ms: int = 0, min_bytes: int = 0,
              max_bytes: int = 1 << 20) -> list[Any]:
        """Fetch v11 of (topic, partition, offset, partition_max_bytes); returns partition responses."""
        response = self.request(ApiKey.FETCH, 11, fetch_body(wanted, max_wait_ms, min_bytes, max_bytes))
        return [p for t in response.responses for p in t.partitions]

    def init_producer_id(self) -> int:
        """InitProducerId v4 for an idempotent (non-transactional) producer; returns its id."""
        response = self.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                        "producer_id": -1, "producer_epoch": -1})
        assert response.error_code == 0, response
        return int(response.producer_id)
