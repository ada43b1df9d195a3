"""The client side of the Kafka protocol, for a broker talking to another broker (a follower
fetching from its leader): encode a request, decode its response, over one asyncio connection.
"""

from __future__ import annotations

import asyncio
import functools
import io
import struct
from typing import Any

from kio import index
from kio.serial import entity_reader, entity_writer

from tidemark.wire.build import build
from tidemark.wire.fast_requests import FAST_REQUEST_ENCODERS

_SIZE = struct.Struct(">i")
# kio resolves a schema by importing its module by name on every call: a follower asks for the
# same two (Fetch, its response) thousands of times a second.
load_request_schema = functools.cache(index.load_request_schema)
load_response_schema = functools.cache(index.load_response_schema)
CLOSE_TIMEOUT_S = 1.0


def encode_request(api_key: int, version: int, correlation_id: int, body: dict[str, Any],
                   client_id: str = "tidemark") -> bytes:
    """A request's payload (header and body), without the size prefix."""
    fast = FAST_REQUEST_ENCODERS.get((api_key, version))
    if fast is not None:
        return fast(correlation_id, client_id, body)
    return encode_request_with_kio(api_key, version, correlation_id, body, client_id)


def encode_request_with_kio(api_key: int, version: int, correlation_id: int, body: dict[str, Any],
                            client_id: str = "tidemark") -> bytes:
    request_cls = load_request_schema(api_key, version)
    header_cls = request_cls.__header_schema__
    header = {"request_api_key": api_key, "request_api_version": version, "correlation_id": correlation_id,
              "client_id": client_id}
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, build(header_cls, header))
    entity_writer(request_cls)(buffer, build(request_cls, body))
    return buffer.getvalue()


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response payload."""
    response_cls = load_response_schema(api_key, version)
    header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(response_cls)(frame, offset)
    return header.correlation_id, body


class BrokerConnection:
    """One connection to a broker; requests are sent and answered one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self._reader, self._writer = reader, writer
        self._client_id = client_id
        self._correlation_id = 0

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str, timeout_s: float) -> BrokerConnection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        return cls(reader, writer, client_id)

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float) -> Any:
        self._correlation_id += 1
        payload = encode_request(api_key, version, self._correlation_id, body, self._client_id)
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        await self._writer.drain()

        async def receive() -> bytes:
            (size,) = _SIZE.unpack(await self._reader.readexactly(4))
            return await self._reader.readexactly(size)

        correlation_id, response = decode_response(api_key, version, await asyncio.wait_for(receive(), timeout_s))
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"response {correlation_id} to request {self._correlation_id}")
        return response

    async def close(self) -> None:
        self._writer.close()
        try:  # bounded: a peer that stopped reading must not hold the caller (a broker stopping)
            await asyncio.wait_for(self._writer.wait_closed(), CLOSE_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError):
            pass
