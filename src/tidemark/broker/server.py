"""The asyncio broker: accepts connections, decodes frames, dispatches APIs, writes responses.

Each connection reads frames in order and starts each request's handler as a task at once, so
a produce waiting for its fsync does not stop the next request from being appended; responses
are written strictly in request order, as Kafka clients require.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from tidemark.broker import metrics
from tidemark.broker.apis import api_versions, fetch, init_producer_id, list_offsets, metadata, produce, topics
from tidemark.broker.config import BrokerConfig
from tidemark.broker.replica_manager import ReplicaManager
from tidemark.wire.build import build
from tidemark.wire.codec import (
    CODEC_API_RANGES,
    Request,
    api_versions_fallback,
    decode_request,
    encode_response,
    error_response,
)
from tidemark.wire.errors import ProtocolError
from tidemark.wire.framing import FrameDecoder

log = structlog.get_logger("tidemark.broker")

Handler = Callable[["Broker", Request], Awaitable[Any]]

# api key -> (handler, lowest version served); the highest is what the codec covers.
HANDLERS: dict[int, tuple[Handler, int]] = {
    0: (produce.handle, 3),
    1: (fetch.handle, 4),
    2: (list_offsets.handle, 0),
    3: (metadata.handle, 0),
    18: (api_versions.handle, 0),
    19: (topics.handle_create, 2),
    20: (topics.handle_delete, 1),
    22: (init_producer_id.handle, 0),
}

MAX_IN_FLIGHT_PER_CONNECTION = 128


def supported_versions() -> dict[int, tuple[int, int]]:
    return {key: (low, CODEC_API_RANGES[key][1]) for key, (_, low) in HANDLERS.items()}


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: Path, host: str = "127.0.0.1", port: int = 9092) -> None:
        self.config = config
        self.node_id = config.node_id
        self.host = host
        self.port = port
        self.advertised_host = host
        self.advertised_port = port
        self.supported_versions = supported_versions()
        self.replicas = ReplicaManager(config, data_dir)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        started = time.perf_counter()
        self.replicas.open()
        self.replicas.start()
        self._server = await asyncio.start_server(self._on_connection, self.host, self.port, limit=2**20)
        self.advertised_port = self._server.sockets[0].getsockname()[1]
        self.port = self.advertised_port
        log.info(
            "broker_started",
            listen=f"{self.host}:{self.port}",
            data_dir=str(self.replicas.data_dir),
            node_id=self.node_id,
            partitions=len(self.replicas.partitions),
            startup_seconds=round(time.perf_counter() - started, 3),
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.replicas.close()
        log.info("broker_stopped", clean_shutdown=True)

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        metrics.CONNECTIONS.inc()
        peer = writer.get_extra_info("peername")
        try:
            await Connection(self, reader, writer).run()
        except asyncio.CancelledError:
            pass
        except ProtocolError as exc:
            metrics.PROTOCOL_ERRORS.labels(type(exc).__name__).inc()
            log.warning("connection_closed_protocol_error", peer=str(peer), error=str(exc))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            metrics.CONNECTIONS.dec()
            self._connections.discard(task)
            writer.close()

    async def dispatch(self, request: Request) -> bytes | None:
        """Run one request's handler; return the encoded response frame, or None for no response."""
        api = api_key_map.get(request.api_key, str(request.api_key))
        metrics.REQUESTS.labels(api).inc()
        started = time.perf_counter()
        if request.unsupported:
            if request.api_key == 18:
                return api_versions_fallback(request, self.supported_versions)
            # A version kio knows: answer UNSUPPORTED_VERSION; otherwise error_response raises
            # LookupError and the connection closes, as Kafka does.
            try:
                return encode_response(request, error_response(request, ErrorCode.unsupported_version))
            except LookupError:
                raise ProtocolError(f"unsupported API {request.api_key} v{request.api_version}") from None
        handler, _ = HANDLERS[request.api_key]
        try:
            result = await handler(self, request)
        except Exception:
            log.exception("handler_failed", api=api, version=request.api_version)
            return encode_response(request, error_response(request, ErrorCode.unknown_server_error))
        finally:
            metrics.REQUEST_SECONDS.labels(api).observe(time.perf_counter() - started)
        if result is None:
            return None
        if isinstance(result, dict):
            result = build(_response_class(request.api_key, request.api_version), result)
        return encode_response(request, result)


_RESPONSE_CLASSES: dict[tuple[int, int], type] = {}


def _response_class(api_key: int, version: int) -> type:
    cls = _RESPONSE_CLASSES.get((api_key, version))
    if cls is None:
        cls = _RESPONSE_CLASSES[(api_key, version)] = load_response_schema(api_key, version)
    return cls


class Connection:
    """One client connection: frames in, handler tasks started in order, responses out in order."""

    def __init__(self, broker: Broker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"])
        self.pending: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(MAX_IN_FLIGHT_PER_CONNECTION)

    async def run(self) -> None:
        writer_task = asyncio.get_running_loop().create_task(self._write_responses())
        try:
            while True:
                data = await self.reader.read(2**20)
                if not data:
                    break
                for frame in self.decoder.feed(data):
                    request = decode_request(frame, self.broker.supported_versions)
                    await self.pending.put(asyncio.get_running_loop().create_task(self.broker.dispatch(request)))
                if writer_task.done():
                    break
        finally:
            # Let responses already in flight go out before the connection closes.
            if not writer_task.done():
                await self.pending.put(None)
                try:
                    await writer_task
                except (ConnectionError, ProtocolError):
                    pass
        if writer_task.done() and not writer_task.cancelled() and writer_task.exception():
            raise writer_task.exception()  # type: ignore[misc]

    async def _write_responses(self) -> None:
        while True:
            task = await self.pending.get()
            if task is None:
                return
            frame = await task
            if frame is not None:
                self.writer.write(frame)
                if self.writer.transport.get_write_buffer_size() > 2**20:
                    await self.writer.drain()
                elif self.pending.empty():
                    await self.writer.drain()
