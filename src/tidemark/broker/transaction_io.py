"""The transaction coordinator's I/O on this broker: `__transaction_state` as the runtime's
topic, and the marker sender's way to the partition leaders.

Markers for a partition led here go to this broker's own WriteTxnMarkers handler, through the
same interface as a request off the wire; markers for partitions led elsewhere go over one pooled
connection per destination broker (`MultiplexedConnection`), bounded by request.timeout.ms,
dropped when it fails so the retry connects afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.broker.coordinator_io import LogOffsetsTopic, LogPartitionWriter
from tidemark.coordinator.runtime.io import PartitionWriter
from tidemark.coordinator.transactions.markers import MarkerErrors
from tidemark.records.compression import CompressionType
from tidemark.records.transaction_log_schema import TRANSACTION_STATE_TOPIC
from tidemark.wire.build import build
from tidemark.wire.client import MultiplexedConnection
from tidemark.wire.codec import Request

if TYPE_CHECKING:
    from tidemark.broker.cluster import ClusterLink
    from tidemark.broker.config import BrokerConfig
    from tidemark.broker.context import RequestContext
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.transaction_markers")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
CLIENT_ID = "tidemark-txn-markers"


class LogTransactionStateTopic(LogOffsetsTopic):
    """`__transaction_state` in this broker's PartitionManager (compacted, uncompressed, as
    Kafka enforces for it)."""

    def partition_count(self) -> int | None:
        topic = self.replicas.topic(TRANSACTION_STATE_TOPIC)
        return topic.partitions if topic else None

    def create(self) -> None:
        self.replicas.create_topic(
            TRANSACTION_STATE_TOPIC,
            self.config["transaction.state.log.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": self.config["transaction.state.log.segment.bytes"]},
            internal=True,
        )

    def writer(self, index: int) -> PartitionWriter | None:
        partition = self.replicas.partition(TRANSACTION_STATE_TOPIC, index)
        if partition is None:
            return None
        return LogPartitionWriter(self.config, self.replicas, partition, CompressionType.NONE,
                                  self.config["transaction.state.log.load.buffer.size"])

    def on_deleted(self, callback: Callable[[], None]) -> None:
        self.replicas.on_topic_deleted(lambda name: callback() if name == TRANSACTION_STATE_TOPIC else None)


def marker_errors(response: Any) -> MarkerErrors:
    """A WriteTxnMarkers response (a kio entity or the dict a handler returns) as
    producer id -> partition -> error."""
    def get(item: Any, name: str) -> Any:
        return item[name] if isinstance(item, dict) else getattr(item, name)

    errors: MarkerErrors = {}
    for marker in get(response, "markers"):
        by_partition = errors.setdefault(get(marker, "producer_id"), {})
        for topic in get(marker, "topics"):
            for partition in get(topic, "partitions"):
                by_partition[(get(topic, "name"), get(partition, "partition_index"))] = \
                    ErrorCode(get(partition, "error_code"))
    return errors


class BrokerMarkerDestinations:
    """The partition leaders as this broker sees them (the applied cluster view, or itself)."""

    def __init__(self, config: BrokerConfig, replicas: PartitionManager, cluster: ClusterLink | None,
                 local_context: Callable[[], RequestContext],
                 local_handler: Callable[[], Callable[[RequestContext, Request], Awaitable[Any]] | None]) -> None:
        self.config = config
        self.replicas = replicas
        self.cluster = cluster
        self._local_context = local_context
        self._local_handler = local_handler
        self._timeout_s = config["request.timeout.ms"] / 1000
        self._pool: dict[int, tuple[tuple[str, int], MultiplexedConnection]] = {}
        self._connecting: dict[int, asyncio.Lock] = {}

    def partition_exists(self, topic: str, partition: int) -> bool:
        return self.replicas.has_partition(topic, partition)

    def leader_of(self, topic: str, partition: int) -> int | None:
        if self.cluster is None:
            return self.config.node_id
        leader = self.cluster.leader_of(topic, partition)
        return leader.id if leader is not None else None

    async def write_markers(self, broker_id: int, request: dict[str, Any]) -> MarkerErrors:
        if broker_id == self.config.node_id:
            return await self._write_locally(request)
        return await self._write_remotely(broker_id, request)

    async def _write_locally(self, body: dict[str, Any]) -> MarkerErrors:
        handler = self._local_handler()
        if handler is None:
            raise ConnectionError("WriteTxnMarkers is not served by this broker")
        request = Request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, 0, CLIENT_ID,
                          build(load_request_schema(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION), body), False)
        return marker_errors(await handler(self._local_context().for_request(request), request))

    async def _write_remotely(self, broker_id: int, body: dict[str, Any]) -> MarkerErrors:
        if self.cluster is None:
            raise ConnectionError(f"broker {broker_id} is unknown")
        broker = self.cluster.snapshot.brokers.get(broker_id)
        if broker is None:
            raise ConnectionError(f"broker {broker_id} is not alive")
        address = (broker.host, broker.port)
        lock = self._connecting.setdefault(broker_id, asyncio.Lock())
        async with asyncio.timeout(self._timeout_s):
            async with lock:
                pooled = self._pool.get(broker_id)
                if pooled is None or pooled[0] != address or pooled[1].broken:
                    if pooled is not None:
                        await pooled[1].close()
                    pooled = self._pool[broker_id] = (address, await MultiplexedConnection.connect(
                        *address, CLIENT_ID, self._timeout_s))
            connection = pooled[1]
            try:
                response = await connection.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body,
                                                    self._timeout_s)
            except BaseException:
                if self._pool.get(broker_id, (None, None))[1] is connection:
                    del self._pool[broker_id]
                await connection.close()
                raise
        return marker_errors(response)

    async def close(self) -> None:
        pooled, self._pool = list(self._pool.values()), {}
        await asyncio.gather(*(connection.close() for _, connection in pooled), return_exceptions=True)
