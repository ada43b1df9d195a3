"""Handlers are served a RequestContext: the request's header facts, the connection's peer, the
broker's clock and node; and the handler modules do not depend on the server that runs them."""

from __future__ import annotations

import ast
import asyncio
import datetime
import struct
from pathlib import Path
from typing import Any

from tests.coordinator.conftest import ManualClock
from tests.integration.raw import decode_response, encode_request
from tidemark.broker import apis
from tidemark.broker.config import BrokerConfig
from tidemark.broker.context import RequestContext
from tidemark.broker.server import HANDLERS, Broker
from tidemark.records.batch import build_batch

PRODUCE, METADATA = 0, 3
CLOCK_MS = 1_234_567_890_123
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def test_handler_modules_do_not_import_the_server():
    """Not even for type checking: the server imports the handlers, never the other way round."""
    for path in Path(apis.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("tidemark.broker.server"), path.name
            elif isinstance(node, ast.Import):
                assert not any(a.name.startswith("tidemark.broker.server") for a in node.names), path.name


async def _exchange(broker: Broker, api_key: int, version: int, correlation_id: int, body: dict) -> Any:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    try:
        payload = encode_request(api_key, version, correlation_id, body)
        writer.write(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        got, response = decode_response(api_key, version, await reader.readexactly(size))
        assert got == correlation_id
        return response
    finally:
        writer.close()


def test_handler_sees_the_request_header_and_the_connection_peer(tmp_path):
    seen: list[RequestContext] = []
    metadata, low = HANDLERS[METADATA]

    async def recording(ctx: RequestContext, request: Any) -> Any:
        seen.append(ctx)
        return await metadata(ctx, request)

    async def scenario() -> None:
        broker = Broker(BrokerConfig({}), tmp_path, port=0, handlers={**HANDLERS, METADATA: (recording, low)})
        await broker.start()
        try:
            response = await _exchange(broker, METADATA, 12, 77, {
                "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
            assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(0, "127.0.0.1", broker.port)]
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    (ctx,) = seen
    assert (ctx.api_version, ctx.correlation_id, ctx.client_id) == (12, 77, "raw-test")
    assert ctx.client_host == "127.0.0.1"


def test_produce_stamps_log_append_time_from_the_brokers_clock(tmp_path):
    async def scenario() -> None:
        broker = Broker(BrokerConfig({}), tmp_path, port=0, clock=ManualClock(CLOCK_MS))
        await broker.start()
        try:
            broker.replicas.create_topic("t", 1, {"message.timestamp.type": "LogAppendTime"})
            response = await _exchange(broker, PRODUCE, 9, 1, {"acks": 1, "timeout": 10000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": build_batch([(None, b"v", (), 1)])}]}]})
            partition = response.responses[0].partition_responses[0]
            assert (partition.error_code, partition.base_offset) == (0, 0)
            assert (partition.log_append_time - EPOCH) // datetime.timedelta(milliseconds=1) == CLOCK_MS
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
