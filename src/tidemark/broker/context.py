"""What a request handler may use: the request's facts and the broker's parts it serves from.

Handlers are `async def handle(ctx: RequestContext, request: Request)`. The broker builds one
context per connection (client host, clock, config, node, partitions, coordinator) and, per
request, a copy carrying that request's header facts: one small object per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

    from tidemark.broker.config import BrokerConfig
    from tidemark.broker.quotas.store import QuotaStore
    from tidemark.coordinator.runtime.io import Clock
    from tidemark.replication.partition_manager import PartitionManager
    from tidemark.broker.cluster import ClusterLink
    from tidemark.broker.security.authorizer import Authorizer
    from tidemark.coordinator.result import Result
    from tidemark.coordinator.shard import GroupCoordinatorShard
    from tidemark.coordinator.transactions.coordinator import TransactionCoordinator
    from tidemark.wire.codec import Request

@dataclass(frozen=True, slots=True)
class Node:
    """This broker as clients reach it (Metadata brokers, FindCoordinator)."""

    id: int
    host: str
    port: int


class Coordinator(Protocol):
    """The group coordinator as handlers see it."""

    def ensure_offsets_topic(self) -> None: ...

    def partition_for(self, group_id: str) -> int: ...

    async def call(self, group_id: str, event: Callable[[GroupCoordinatorShard, int, int], Result],
                   error_response: Callable[[ErrorCode], Any]) -> Any: ...

    def read(self, group_id: str, reader: Callable[[GroupCoordinatorShard], Any],
             error_response: Callable[[ErrorCode], Any]) -> Any: ...

    def list_groups(self, body: Any, version: int) -> tuple[list[dict[str, Any]], ErrorCode]: ...

    async def on_topics_deleted(self, topics: list[str]) -> None: ...

    async def complete_transaction(self, partition_index: int, producer_id: int, producer_epoch: int,
                                   committed: bool, coordinator_epoch: int) -> ErrorCode: ...


class RequestContext:
    """One request's view of the broker. Read-only by convention (slotted, not frozen: it is
    copied per request on the hot path, and a frozen class would make that copy slower)."""

    __slots__ = ("api_version", "client_id", "correlation_id", "client_host", "clock", "config", "node",
                 "partitions", "coordinator", "supported_versions", "cluster", "transactions", "listener",
                 "principal", "authorizer", "quotas")

    api_version: int
    client_id: str | None
    correlation_id: int
    client_host: str  # the connection's peer address ("" when it has none)
    clock: Clock
    config: BrokerConfig
    node: Node
    partitions: PartitionManager  # this broker's partitions (leaders and followers)
    coordinator: Coordinator
    supported_versions: dict[int, tuple[int, int]]  # api key -> (lowest, highest) version served
    cluster: ClusterLink | None  # this broker's ZooKeeper cluster, None when embedded
    transactions: TransactionCoordinator  # the transaction coordinator (None in some unit tests)
    listener: str  # the listener the connection came in on (its name: Metadata answers its addresses)
    principal: str  # who the connection authenticated as: Kafka's "User:NAME", "User:ANONYMOUS" when it did not
    authorizer: Authorizer | None  # None: authorizer.class.name is empty, everything is allowed
    quotas: QuotaStore | None  # the client quotas (Describe/AlterClientQuotas)

    def __init__(self, *, client_host: str, clock: Clock, config: BrokerConfig, node: Node,
                 partitions: PartitionManager, coordinator: Coordinator,
                 supported_versions: dict[int, tuple[int, int]], cluster: ClusterLink | None = None,
                 api_version: int = -1, client_id: str | None = None, correlation_id: int = -1,
                 transactions: TransactionCoordinator | None = None, listener: str = "PLAINTEXT",
                 principal: str = "User:ANONYMOUS", authorizer: Authorizer | None = None,
                 quotas: QuotaStore | None = None) -> None:
        self.api_version = api_version
        self.client_id = client_id
        self.correlation_id = correlation_id
        self.client_host = client_host
        self.clock = clock
        self.config = config
        self.node = node
        self.partitions = partitions
        self.coordinator = coordinator
        self.supported_versions = supported_versions
        self.cluster = cluster
        self.transactions = transactions  # type: ignore[assignment]
        self.listener = listener
        self.principal = principal
        self.authorizer = authorizer
        self.quotas = quotas

    def for_request(self, request: Request) -> RequestContext:
        """This (connection's) context carrying `request`'s header facts."""
        ctx = _new(RequestContext)
        ctx.api_version = request.api_version
        ctx.client_id = request.client_id
        ctx.correlation_id = request.correlation_id
        ctx.client_host = self.client_host
        ctx.clock = self.clock
        ctx.config = self.config
        ctx.node = self.node
        ctx.partitions = self.partitions
        ctx.coordinator = self.coordinator
        ctx.supported_versions = self.supported_versions
        ctx.cluster = self.cluster
        ctx.transactions = self.transactions
        ctx.listener = self.listener
        ctx.principal = self.principal
        ctx.authorizer = self.authorizer
        ctx.quotas = self.quotas
        return ctx


_new = object.__new__
