"""The client side of the Kafka protocol, for a broker talking to another broker (a follower
fetching from its leader, a forwarded OffsetFetch): encode a request, decode its response, over
one asyncio connection: BrokerConnection one request at a time, MultiplexedConnection many.
"""

from __future__ import annotations

import asyncio
import functools
import io
import struct
from collections.abc import Awaitable, Callable
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


# Opens an (authenticated, for a secured inter-broker listener) connection: broker/security/client.py
Opener = Callable[[str, int, float], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


async def _open(host: str, port: int, timeout_s: float,
                opener: Opener | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if opener is not None:
        return await opener(host, port, timeout_s)
    return await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)


class BrokerConnection:
    """One connection to a broker; requests are sent and answered one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self._reader, self._writer = reader, writer
        self._client_id = client_id
        self._correlation_id = 0

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str, timeout_s: float,
                      opener: Opener | None = None) -> BrokerConnection:
        reader, writer = await _open(host, port, timeout_s, opener)
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


class MultiplexedConnection:
    """One connection carrying many requests at once: each is matched to its response by its
    correlation id, so a request does not wait for the answers to the ones sent before it (a
    late answer to a request that gave up is read and dropped). Kafka brokers answer a
    connection's requests in order, so against them this pipelines the requests; a peer that
    answers out of order is served as it answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self._reader, self._writer = reader, writer
        self._client_id = client_id
        self._correlation_id = 0
        # correlation id -> (api key, version, the future of its response body)
        self._waiting: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._failure: BaseException | None = None
        self._reading = asyncio.get_running_loop().create_task(self._read_responses())

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str, timeout_s: float,
                      opener: Opener | None = None) -> MultiplexedConnection:
        reader, writer = await _open(host, port, timeout_s, opener)
        return cls(reader, writer, client_id)

    @property
    def broken(self) -> bool:
        """The connection failed (or was closed): every request on it fails."""
        return self._failure is not None

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float) -> Any:
        if self._failure is not None:
            raise ConnectionError(f"connection failed: {self._failure!r}")
        self._correlation_id += 1
        correlation_id = self._correlation_id
        payload = encode_request(api_key, version, correlation_id, body, self._client_id)
        answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = (api_key, version, answered)
        try:
            self._writer.write(_SIZE.pack(len(payload)) + payload)  # one write: frames never interleave
            await asyncio.wait_for(self._writer.drain(), timeout_s)
            return await asyncio.wait_for(answered, timeout_s)
        finally:
            self._waiting.pop(correlation_id, None)

    async def _read_responses(self) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await self._reader.readexactly(4))
                frame = await self._reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame)
                waiting = self._waiting.get(correlation_id)
                if waiting is None:
                    continue  # its request gave up (timed out): nobody reads this answer
                api_key, version, answered = waiting
                if not answered.done():
                    answered.set_result(decode_response(api_key, version, frame)[1])
        except Exception as exc:  # noqa: BLE001 - EOF, reset, undecodable frame: the connection is done
            self._fail(exc)
        except asyncio.CancelledError:
            self._fail(ConnectionError("connection closed"))
            raise

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        waiting, self._waiting = self._waiting, {}
        for _api_key, _version, answered in waiting.values():
            if not answered.done():
                answered.set_exception(ConnectionError(f"connection failed: {exc!r}"))

    async def close(self) -> None:
        self._reading.cancel()
        try:
            await self._reading
        except asyncio.CancelledError:
            pass
        self._writer.close()
        try:  # bounded, as BrokerConnection.close
            await asyncio.wait_for(self._writer.wait_closed(), CLOSE_TIMEOUT_S)
        except (ConnectionError, OSError, TimeoutError):
            pass
