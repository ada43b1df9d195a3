"""The asyncio broker: accepts connections, decodes frames, dispatches APIs, writes responses.

Each connection reads frames in order and starts each request's handler as a task, so a produce
waiting for its fsync does not stop the next request from being appended; responses are written
strictly in request order, as Kafka clients require. Kafka handles one request per connection at
a time; we pipeline, within bounds: a request starts only while the connection has fewer than
MAX_IN_FLIGHT_PER_CONNECTION in flight and the bytes it holds for responses (a fetch counts its
size limit until it is answered, then its frame until the transport has it, plus what the
transport has not sent) stay under MAX_UNSENT_BYTES_PER_CONNECTION. A connection with requests
it may not start yet is not read further, so a client that never reads holds a bounded amount.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import socket
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from tidemark import metrics
from tidemark.broker import dynamic_config, zk_offsets
from tidemark.broker.apis import (
    acls,
    api_versions,
    client_quotas,
    configs,
    delete_records,
    describe_cluster,
    elect_leaders,
    fetch,
    groups,
    init_producer_id,
    list_offsets,
    metadata,
    offset_for_leader_epoch,
    offsets,
    produce,
    topics,
    transactions,
    txn_markers,
)
from tidemark.broker.config import BrokerConfig, listener_value
from tidemark.broker.context import Node, RequestContext
from tidemark.broker.quotas.manager import ClientQuotas
from tidemark.broker.quotas.store import QuotaStore
from tidemark.broker.quotas.usage import Timed, charge, limited, throttle_ms, with_throttle
from tidemark.broker.security import listeners as security_listeners
from tidemark.broker.security import sasl, scram_admin, tls
from tidemark.broker.security.scram_store import CredentialStore, FileCredentialStore, ScramCredential, ZkCredentialStore
from tidemark.broker.coordinator_io import LogOffsetsTopic
from tidemark.broker.transaction_io import BrokerMarkerDestinations, LogTransactionStateTopic
from tidemark.coordinator.transactions.coordinator import TransactionCoordinator
from tidemark.broker.security import authorizing
from tidemark.coordinator.runtime.io import EVENT_METER, Cancellable, Clock, Meter, SystemClock
from tidemark.broker.cluster import ClusterLink
from tidemark.coordinator.group_coordinator import GroupCoordinator
from tidemark.cluster.zk.session import ZkSession
from tidemark.hold import hold_async
from tidemark.replication.partition_manager import PartitionManager, PartitionManagerConfig
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.build import build
from tidemark.wire.codec import (
    CODEC_API_RANGES,
    Request,
    api_versions_fallback,
    decode_request,
    encode_response,
    error_response,
    response_schema,
)
from tidemark.wire.errors import NoResponseExpected, ProtocolError
from tidemark.wire.fast_responses import encode_fast
from tidemark.wire.framing import FrameDecoder, OutboundFrame

log = structlog.get_logger("tidemark.broker")

Handler = Callable[[RequestContext, Request], Awaitable[Any]]

# api key -> (handler, lowest version served); the highest is what the codec covers.
HANDLERS: dict[int, tuple[Handler, int]] = {
    ApiKey.PRODUCE: (produce.handle, 0),  # v0-v2 carry message formats v0/v1, converted on the way in
    ApiKey.FETCH: (fetch.handle, 4),
    ApiKey.LIST_OFFSETS: (list_offsets.handle, 0),
    ApiKey.METADATA: (metadata.handle, 0),
    ApiKey.API_VERSIONS: (api_versions.handle, 0),
    ApiKey.CREATE_TOPICS: (topics.handle_create, 2),
    ApiKey.DELETE_TOPICS: (topics.handle_delete, 1),
    ApiKey.CREATE_PARTITIONS: (topics.handle_create_partitions, 0),
    ApiKey.INIT_PRODUCER_ID: (init_producer_id.handle, 0),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (offset_for_leader_epoch.handle, 2),  # kio has v2-v4
    ApiKey.OFFSET_COMMIT: (offsets.handle_commit, 0),
    ApiKey.OFFSET_FETCH: (offsets.handle_fetch, 0),
    ApiKey.OFFSET_DELETE: (offsets.handle_delete, 0),
    ApiKey.FIND_COORDINATOR: (groups.handle_find_coordinator, 0),
    ApiKey.JOIN_GROUP: (groups.handle_join, 0),
    ApiKey.HEARTBEAT: (groups.handle_heartbeat, 0),
    ApiKey.LEAVE_GROUP: (groups.handle_leave, 0),
    ApiKey.SYNC_GROUP: (groups.handle_sync, 0),
    ApiKey.DESCRIBE_GROUPS: (groups.handle_describe, 0),
    ApiKey.LIST_GROUPS: (groups.handle_list, 0),
    ApiKey.DELETE_GROUPS: (groups.handle_delete_groups, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (groups.handle_consumer_group_heartbeat, 0),  # KIP-848
    ApiKey.CONSUMER_GROUP_DESCRIBE: (groups.handle_consumer_group_describe, 0),
    ApiKey.DELETE_RECORDS: (delete_records.handle, 0),
    ApiKey.DESCRIBE_CONFIGS: (configs.handle_describe, 0),
    ApiKey.ALTER_CONFIGS: (configs.handle_alter, 0),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (configs.handle_incremental_alter, 0),
    ApiKey.ELECT_LEADERS: (elect_leaders.handle, 0),
    ApiKey.DESCRIBE_CLUSTER: (describe_cluster.handle, 0),
    ApiKey.WRITE_TXN_MARKERS: (txn_markers.handle_write_txn_markers, 0),  # kio has v1-v2 (the flexible ones)
    ApiKey.TXN_OFFSET_COMMIT: (txn_markers.handle_txn_offset_commit, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (transactions.handle_add_partitions, 0),
    ApiKey.ADD_OFFSETS_TO_TXN: (transactions.handle_add_offsets, 0),
    ApiKey.END_TXN: (transactions.handle_end_txn, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (transactions.handle_describe, 0),
    ApiKey.LIST_TRANSACTIONS: (transactions.handle_list, 0),
    ApiKey.DESCRIBE_ACLS: (acls.handle_describe, 1),
    ApiKey.CREATE_ACLS: (acls.handle_create, 1),
    ApiKey.DELETE_ACLS: (acls.handle_delete, 1),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (client_quotas.handle_describe, 0),
    ApiKey.ALTER_CLIENT_QUOTAS: (client_quotas.handle_alter, 0),
    # On a connection that needs no (more) authentication: refused with ILLEGAL_SASL_STATE, as
    # Kafka's request handler does; before authentication the connection's authenticator serves them.
    ApiKey.SASL_HANDSHAKE: (scram_admin.handle_sasl_after_authentication, 0),
    ApiKey.SASL_AUTHENTICATE: (scram_admin.handle_sasl_after_authentication, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (scram_admin.handle_describe, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (scram_admin.handle_alter, 0),
}

# api key -> the highest version served where it is below what the codec covers: AddPartitionsToTxn
# v5 and EndTxn v5 belong to transaction.version 2 (KIP-890 part 2), which is not offered.
HIGHEST_VERSIONS: dict[int, int] = {ApiKey.ADD_PARTITIONS_TO_TXN: 4, ApiKey.END_TXN: 4}

# The whole stop fits in controlled.shutdown.timeout.ms + 5 s (cli/serve.py ends the process
# then, whatever is left): beyond the controlled shutdown, this long to close the controller, the
# ZooKeeper offset store and the session, then the logs.
CLUSTER_STOP_GRACE_S = 1.5
MAX_IN_FLIGHT_PER_CONNECTION = 128
MAX_UNSENT_BYTES_PER_CONNECTION = 16 * 1024 * 1024


def supported_versions(handlers: dict[int, tuple[Handler, int]] = HANDLERS) -> dict[int, tuple[int, int]]:
    return {key: (max(low, CODEC_API_RANGES[key][0]), min(CODEC_API_RANGES[key][1], HIGHEST_VERSIONS.get(key, 99)))
            for key, (_, low) in handlers.items()}


def partition_manager_config(config: BrokerConfig) -> PartitionManagerConfig:
    """The partition manager's settings, taken from the broker's config."""
    return PartitionManagerConfig(
        node_id=config.node_id, replicated=bool(config["zookeeper.connect"]), log_config=config.log_config,
        cleaner=config.cleaner_config(), retention_check_interval_ms=config["log.retention.check.interval.ms"],
        producer_id_expiration_check_interval_ms=config["producer.id.expiration.check.interval.ms"],
        high_watermark_checkpoint_interval_ms=config["replica.high.watermark.checkpoint.interval.ms"],
        replica_flush_interval_ms=config["tidemark.replica.flush.interval.ms"],
        flush_threads=config["tidemark.log.flush.threads"])


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: Path, host: str = "127.0.0.1", port: int = 9092,
                 handlers: dict[int, tuple[Handler, int]] | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.handlers = HANDLERS if handlers is None else handlers
        self.clock = clock or SystemClock()  # injectable: tests control the broker's time
        self.node_id = config.node_id
        # `listeners` when set, else one PLAINTEXT listener on host:port (serve --listen);
        # host and port are the first listener's (its port known once bound).
        try:
            self.listeners = security_listeners.resolve(config, host, port)
        except ValueError as exc:
            from tidemark.broker.config import ConfigError

            raise ConfigError(str(exc)) from None
        self.host, self.port = self.listeners[0].host, self.listeners[0].port
        self.inter_broker_listener = security_listeners.inter_broker_listener_name(config) \
            if config["listeners"] else self.listeners[0].name
        # listener name -> (host, port) it advertises: advertised.listeners' entry, else where it is bound
        self.advertised: dict[str, tuple[str, int]] = {}
        self.bound: dict[str, tuple[str, int]] = {}  # listener name -> (host, port) bound, once started
        try:
            self._tls_contexts = {l.name: tls.server_context(config, l.name) for l in self.listeners if l.tls}
        except ValueError as exc:
            from tidemark.broker.config import ConfigError

            raise ConfigError(str(exc)) from None
        self.supported_versions = zk_offsets.served_versions(supported_versions(self.handlers), config)
        self.replicas = PartitionManager(partition_manager_config(config), data_dir)
        self.coordinator = GroupCoordinator(config, topic=LogOffsetsTopic(config, self.replicas), clock=self.clock)
        # A ZooKeeper cluster's member when zookeeper.connect is set (on one ZooKeeper session,
        # shared with the ZooKeeper offset store); else the embedded single node.
        self.zookeeper = ZkSession(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"]) \
            if config["zookeeper.connect"] else None
        # The transaction coordinator; its markers reach partition leaders through this broker's
        # own WriteTxnMarkers handler or the cluster's connections.
        self.marker_destinations = BrokerMarkerDestinations(
            config, self.replicas, None, lambda: self.connection_context(""),
            lambda: self.handlers.get(ApiKey.WRITE_TXN_MARKERS, (None, 0))[0])
        self.transactions = TransactionCoordinator(config, topic=LogTransactionStateTopic(config, self.replicas),
                                                   destinations=self.marker_destinations, clock=self.clock)
        self.cluster = ClusterLink(config, self.replicas, _Coordinators(self.coordinator, self.transactions),
                                   self.clock, self.zookeeper) if self.zookeeper is not None else None
        self.marker_destinations.cluster = self.cluster
        self.authorizer, self.acl_store = authorizing.authorizer_of(config, self.replicas, self.zookeeper)
        # Client quotas: kept in ZooKeeper (followed through its change notices) or the data dir.
        self.quotas = ClientQuotas(config["quota.window.num"], config["quota.window.size.seconds"])
        self.quota_store = QuotaStore(self.quotas, self.cluster)
        if self.cluster is not None:
            self.cluster.quota_reload = self.quota_store.reload
        self._servers: list[asyncio.base_events.Server] = []
        # SCRAM credentials: ZooKeeper's /config/users on a cluster, the data directory otherwise.
        self.credentials: CredentialStore = ZkCredentialStore(self.zookeeper.client) \
            if self.zookeeper is not None else FileCredentialStore(data_dir)
        self._opened = False  # the logs are open (stop closes them only then)
        self.connections: set[Connection] = set()
        self._connections_per_ip: collections.Counter[str] = collections.Counter()
        self._ip_limits: dict[str, int] = {}
        self.reconfigure_connection_limits()
        dynamic_config.attach(self)  # dynamic settings take effect where they apply

    async def start(self) -> None:
        started = time.perf_counter()
        if self.cluster is not None:
            table = await self.cluster.connect()  # reads the dynamic settings too
            await self.quota_store.load_cluster(self.config["zookeeper.session.timeout.ms"] / 1000)
            self.replicas.open(metadata=lambda: table)
        else:
            self.replicas.open()
            dynamic_config.load_embedded(self.config, self.replicas)
            self.quota_store.load_embedded(self.replicas.metadata)
        self._opened = True
        if self.acl_store is not None:
            await self.acl_store.start()  # ACLs enforced from the first request
        self.replicas.start()
        self.coordinator.start()
        self.transactions.start()
        await hold_async("broker_start")  # a test can hold the start here (logs open, not serving)
        loop = asyncio.get_running_loop()
        # Bound first (the port is known), serving only once this broker has joined its
        # cluster: its first answers already name the controller and the leaders.
        for listener in self.listeners:
            server = await loop.create_server(functools.partial(Connection, self, listener), listener.host or None,
                                              listener.port, ssl=self._tls_contexts.get(listener.name),
                                              start_serving=False)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self.advertised[listener.name] = (listener.advertised.host, listener.advertised.port) \
                if listener.advertised else (listener.host or socket.getfqdn(), port)
            self.bound[listener.name] = (listener.host, port)
            if listener is self.listeners[0]:
                self.port = port
        if self.cluster is not None:
            await self.cluster.start(*self.advertised[self.inter_broker_listener],
                                     endpoints=[f"{n}://{h}:{p}" for n, (h, p) in self.advertised.items()],
                                     protocol_map={l.name: l.protocol for l in self.listeners})
        for server in self._servers:
            await server.start_serving()
        log.info(
            "broker_started",
            listen=f"{self.host}:{self.port}",
            listeners=[f"{l.name}://{l.host}:{s.sockets[0].getsockname()[1]}" for l, s in zip(self.listeners, self._servers)],
            data_dir=str(self.replicas.data_dir),
            node_id=self.node_id,
            partitions=len(self.replicas.partitions),
            startup_seconds=round(time.perf_counter() - started, 3),
        )

    async def stop(self) -> None:
        """Stop whatever start() got to (it may have been cancelled): leave the cluster, then
        close connections, the coordinator and the logs, within controlled.shutdown.timeout.ms
        plus a few seconds; nothing here waits on a thread that ZooKeeper holds."""
        if self.cluster is not None:
            # controlled shutdown: leaderships move away first (bounded: the logs are flushed below
            # whatever ZooKeeper does)
            bound_s = self.config["controlled.shutdown.timeout.ms"] / 1000 + CLUSTER_STOP_GRACE_S
            try:
                await asyncio.wait_for(self.cluster.stop(), bound_s)
            except TimeoutError:
                log.warning("cluster_stop_timed_out", seconds=bound_s)
        for server in self._servers:
            server.close()
        if self.acl_store is not None:
            await self.acl_store.close()
        for connection in list(self.connections):
            connection.close()
        await self.coordinator.stop()
        await self.transactions.stop()
        await self.marker_destinations.close()
        if self._opened:
            await self.replicas.close()
        log.info("broker_stopped", clean_shutdown=self._opened)

    def reconfigure_connection_limits(self) -> None:
        """max.connections.per.ip.overrides by address (at start, and when changed dynamically;
        max.connections and max.connections.per.ip are read at each connection)."""
        self._ip_limits = {_resolve(host): count for host, count in self.config["max.connections.per.ip.overrides"].items()}

    def admit(self, host: str) -> str | None:
        """Count a new connection from host; or name the limit it would exceed (not counted)."""
        if len(self.connections) >= self.config["max.connections"]:
            return "max.connections"
        if self._connections_per_ip[host] >= self._ip_limits.get(host, self.config["max.connections.per.ip"]):
            return "max.connections.per.ip"
        self._connections_per_ip[host] += 1
        return None

    def release(self, host: str) -> None:
        self._connections_per_ip[host] -= 1
        if not self._connections_per_ip[host]:
            del self._connections_per_ip[host]

    @property
    def advertised_host(self) -> str:
        return self.advertised[self.listeners[0].name][0]

    @property
    def advertised_port(self) -> int:
        return self.advertised[self.listeners[0].name][1]

    def connection_context(self, client_host: str, listener: str | None = None,
                           principal: str = sasl.ANONYMOUS) -> RequestContext:
        """The context a connection's requests are handled in (each request gets a copy carrying
        its own header facts): this broker as the connection's listener advertises it."""
        listener = listener or self.listeners[0].name
        return RequestContext(
            client_host=client_host, clock=self.clock, config=self.config,
            node=Node(self.node_id, *self.advertised[listener]),
            partitions=self.replicas, coordinator=self.coordinator, supported_versions=self.supported_versions,
            cluster=self.cluster, transactions=self.transactions, authorizer=self.authorizer,
            quotas=self.quota_store, listener=listener, principal=principal,
        )

    async def scram_credentials(self, user: str) -> dict[str, ScramCredential]:
        """A user's SCRAM credentials, read off the event loop (ZooKeeper or the data directory)."""
        if self.zookeeper is not None:
            return await self.zookeeper.call(self.credentials.get, user)
        return await asyncio.to_thread(self.credentials.get, user)

    async def dispatch(self, connection_context: RequestContext, request: Request,
                       connection: Connection | None = None) -> bytes | OutboundFrame | None:
        """Run one request's handler; return the encoded response frame, or None for no response.
        A client over its quotas is answered at once with throttle_time_ms, and its connection
        muted for that long (KIP-219)."""
        api, requests, seconds = _api_metrics(request.api_key)
        requests.inc()
        started = time.perf_counter()
        if request.unsupported:
            if request.api_key == ApiKey.API_VERSIONS:
                return api_versions_fallback(request, self.supported_versions)
            return _failure_response(request, ErrorCode.unsupported_version)
        handler, _ = self.handlers[request.api_key]
        metered = self.quotas.any
        try:
            if metered:  # request time: the handler's steps and its coordinator events, not its waits
                timed, meter = Timed(handler(connection_context.for_request(request), request)), Meter()
                token = EVENT_METER.set(meter)
                try:
                    result = await timed
                finally:
                    EVENT_METER.reset(token)
            else:
                result = await handler(connection_context.for_request(request), request)
        except Exception:
            log.exception("handler_failed", api=api, version=request.api_version)
            return _failure_response(request, ErrorCode.unknown_server_error)
        finally:
            seconds.observe(time.perf_counter() - started)
        if metered:
            throttle = throttle_ms(self.quotas, connection_context.principal, request.client_id, request.api_key,
                                   request.body, result, timed.seconds + meter.seconds, self.clock.now_ms(),
                                   request.api_key == ApiKey.FETCH and fetch.replica_id_of(request.body) >= 0)
            if throttle:
                result = with_throttle(result, throttle)
            if connection is not None and (throttle or connection.throttled):
                connection.mute(throttle)
        if result is None:
            return None
        encoding = time.perf_counter()
        if isinstance(result, dict):
            frame = encode_fast(request, result)
            if frame is None:
                frame = encode_response(request, build(_response_class(request.api_key, request.api_version), result))
        else:
            frame = encode_response(request, result)
        if metered:  # counts toward the client's next throttle, as this one is decided
            charge(self.quotas, connection_context.principal, request.client_id, time.perf_counter() - encoding,
                   self.clock.now_ms())
        return frame


class _Coordinators:
    """The coordinators as the cluster link sees them: each hears of the leaderships of every
    partition and takes those of its own topic. Everything else (the session fence: may_lead,
    fence, fenced_leaderships, relead) is the group coordinator's alone, as before; the
    transaction coordinator is not fenced by the session lease yet."""

    def __init__(self, group: Any, *others: Any) -> None:
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_coordinators", (group, *others))

    def partition_led(self, topic: str, index: int, leader_epoch: int) -> None:
        for coordinator in self._coordinators:
            coordinator.partition_led(topic, index, leader_epoch)

    def partition_leader_epoch(self, topic: str, index: int, leader_epoch: int) -> None:
        for coordinator in self._coordinators:
            coordinator.partition_leader_epoch(topic, index, leader_epoch)

    def partition_followed(self, topic: str, index: int, leader_epoch: int) -> None:
        for coordinator in self._coordinators:
            coordinator.partition_followed(topic, index, leader_epoch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._group, name, value)


_response_class = response_schema  # kio's classes, and those of the versions written by hand

# api key -> (its name, its request counter, its request time histogram): prometheus' labels()
# lookup costs several microseconds, taken twice per request before this was kept.
_API_METRICS: dict[int, tuple[str, Any, Any]] = {}


def _api_metrics(api_key: int) -> tuple[str, Any, Any]:
    found = _API_METRICS.get(api_key)
    if found is None:
        api = api_key_map.get(api_key, str(api_key))
        found = _API_METRICS[api_key] = (api, metrics.REQUESTS.labels(api), metrics.REQUEST_SECONDS.labels(api))
    return found


def _failure_response(request: Request, code: ErrorCode) -> bytes:
    """The frame answering `request` as failed with `code`: every requested partition, topic,
    group or key carrying it where Kafka puts it. A request no answer can carry the error for
    (an API or version without a response that has a place for it, a Produce with acks=0)
    closes its connection instead, as Kafka does."""
    try:
        body = error_response(request, code)
    except LookupError:
        raise ProtocolError(f"cannot answer api_key={request.api_key} v{request.api_version} with {code.name}") from None
    if body is None:
        raise NoResponseExpected(f"api_key={request.api_key} v{request.api_version} failed with {code.name}")
    return encode_response(request, body)


def _resolve(host: str) -> str:
    """An override's host as the address peers are seen from (names are looked up once)."""
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class Connection(asyncio.BufferedProtocol):
    """One client connection: frames received straight into the frame decoder's buffer, handler
    tasks started in arrival order (within the connection's bounds), responses written in the
    same order."""

    def __init__(self, broker: Broker, listener: security_listeners.Listener | None = None) -> None:
        self.broker = broker
        self.listener = listener or broker.listeners[0]
        # SASL listeners: the authenticator until authentication completes (then None)
        self._auth: sasl.SaslAuthenticator | None = None
        self._auth_step: asyncio.Task[bytes | None] | None = None
        # Produce frames stay views of the receive buffer: their records reach the log uncopied.
        self.decoder = FrameDecoder(broker.config["socket.request.max.bytes"], frozenset((ApiKey.PRODUCE,)))
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        self._host: str | None = None  # set once admitted under the connection limits
        self._waiting: collections.deque[Request | None] = collections.deque()  # None: end of input
        self._pending: collections.deque[asyncio.Task[bytes | None] | None] = collections.deque()
        self._held = 0  # bytes reserved for or held by responses not yet handed to the transport
        self._has_pending = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._eof = False
        self._writer: asyncio.Task[None] | None = None
        self._muted: Cancellable | None = None  # a throttled client's mute, until it ends
        self._muted_until_ms = 0
        self.throttled = False  # its last answer was throttled: one request at a time, as in Kafka
        self.client_id: str | None = None  # the last request's: whose decoding and sending time is

    # -- asyncio.BufferedProtocol -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        host = self.peer[0] if isinstance(self.peer, tuple) else ""
        refused = self.broker.admit(host)
        if refused is not None:
            # As Kafka: the connection is closed at once, before anything is read from it.
            metrics.CONNECTIONS_REFUSED.labels(refused).inc()
            log.warning("connection_refused", peer=str(self.peer), limit=refused)
            transport.abort()
            return
        self._host = host
        principal = sasl.ANONYMOUS
        if self.listener.tls:
            principal = tls.certificate_principal(transport.get_extra_info("peercert")) or principal
        if self.listener.sasl:
            self._auth = sasl.SaslAuthenticator(
                listener_value(self.broker.config, self.listener.name, "sasl.enabled.mechanisms"),
                self.broker.scram_credentials)
            # Kafka's sasl.server.max.receive.size: an unauthenticated peer sends small frames only
            self.decoder.max_frame_bytes = min(self.decoder.max_frame_bytes, sasl.MAX_RECEIVE_SIZE)
        self._context = self.broker.connection_context(host, self.listener.name, principal)
        self.broker.connections.add(self)
        metrics.CONNECTIONS.inc()
        self._writer = asyncio.get_running_loop().create_task(self._write_responses())

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        metered = self.broker.quotas.any
        started = time.perf_counter() if metered else 0.0
        try:
            for frame in self.decoder.buffer_updated(nbytes):
                if self._auth is not None and self._auth.raw_tokens:
                    self._waiting.append(sasl.RawToken(bytes(frame)))  # after a v0 handshake
                else:
                    request = decode_request(frame, self.broker.supported_versions)
                    self.client_id = request.client_id
                    self._waiting.append(request)
        except ProtocolError as exc:
            self._protocol_error(exc)
            return
        if metered:  # the network time of reading and decoding: request time, as in Kafka
            self._charge(time.perf_counter() - started)
        self._start_requests()

    def eof_received(self) -> bool:
        # Half-close: answer what was already asked, then close.
        self._eof = True
        self._waiting.append(None)
        self._start_requests()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self._host is None:
            return  # refused: never counted
        self.broker.release(self._host)
        self.broker.connections.discard(self)
        metrics.CONNECTIONS.dec()
        if self._reading_paused:
            self._reading_paused = False
            metrics.CONNECTIONS_READ_PAUSED.dec()
        if self._writer is not None:
            self._writer.cancel()
        if self._muted is not None:
            self._muted.cancel()
            self._muted = None
        for task in self._pending:
            if task is not None:
                task.cancel()
        self._pending.clear()
        self._waiting.clear()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()
        self._start_requests()

    # -- back-pressure ----------------------------------------------------------------------

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    def _cost(self, request: Request) -> int:
        """Bytes a request may hold until answered: a fetch, up to its response's size limit."""
        if request.api_key == ApiKey.FETCH and not request.unsupported:
            return min(request.body.max_bytes, self.broker.config["fetch.max.bytes"])
        return 0

    def _start_requests(self) -> None:
        """Start waiting requests in order while the connection's bounds allow; stop reading
        while any has to wait."""
        if self._muted is not None:
            return  # throttled: nothing read or started until the mute ends
        waiting, pending = self._waiting, self._pending
        while waiting:
            request = waiting[0]
            task = None
            if request is not None and self._auth is not None:
                if self._auth_step is not None:
                    break  # until authenticated, one handshake step at a time
                if self._auth.state is sasl.State.FAILED:
                    waiting.clear()  # closing: nothing else it sent is processed
                    break
                if not self._auth.allowed(request.api_key):
                    self._protocol_error(ProtocolError(f"unexpected request api_key={request.api_key} "
                                                       "during SASL handshake"))
                    return
                if request.api_key != sasl.API_VERSIONS and not getattr(request, "unsupported", False):
                    task = asyncio.get_running_loop().create_task(self._answer(self._authenticate(request), 0))
                    self._auth_step = task
                    waiting.popleft()
                    pending.append(task)
                    self._has_pending.set()
                    continue
            if request is not None:
                cost = self._cost(request)
                unsent = self._held + self.transport.get_write_buffer_size()
                if pending:
                    if self.throttled or len(pending) >= MAX_IN_FLIGHT_PER_CONNECTION or unsent + cost > MAX_UNSENT_BYTES_PER_CONNECTION:
                        break
                    if self.broker.quotas.any and limited(self.broker.quotas, self._context.principal, request.client_id):
                        break  # under a quota: one at a time, its throttle applies before the next
                elif unsent >= MAX_UNSENT_BYTES_PER_CONNECTION:
                    break  # the transport still holds an earlier large response
                self._held += cost
                task = asyncio.get_running_loop().create_task(
                    self._answer(self.broker.dispatch(self._context, request, self), cost))
            waiting.popleft()
            pending.append(task)
            self._has_pending.set()
        paused = bool(waiting) and not self._eof
        if paused != self._reading_paused and not self.transport.is_closing():
            self._set_reading_paused(paused)

    def _set_reading_paused(self, paused: bool) -> None:
        self._reading_paused = paused
        if paused:
            metrics.CONNECTIONS_READ_PAUSED.inc()
            self.transport.pause_reading()
        else:
            metrics.CONNECTIONS_READ_PAUSED.dec()
            self.transport.resume_reading()

    async def _answer(self, answering: Awaitable[bytes | OutboundFrame | None], cost: int
                      ) -> bytes | OutboundFrame | None:
        """The request's frame, its reservation turned into the frame's real size as the task
        ends: the writer may find the task already done and take the frame before any done
        callback runs, and the bytes it subtracts must already be counted."""
        frame = None
        try:
            frame = await answering
        finally:
            self._held += (len(frame) if frame is not None else 0) - cost
            if self._waiting:
                self._start_requests()
        return frame

    # -- quotas -----------------------------------------------------------------------------

    def _charge(self, seconds: float) -> None:
        charge(self.broker.quotas, self._context.principal, self.client_id, seconds, self.broker.clock.now_ms())

    @property
    def muted(self) -> bool:
        return self._muted is not None

    def mute(self, throttle_ms: int) -> None:
        """KIP-219: a client over its quota has its answer at once and is then not read (nor
        its requests already read started) for the throttle time, on the broker's clock; until
        an answer is not throttled, its requests are handled one at a time, as Kafka handles
        every connection's (so a pipelining client cannot start a burst at each unmute)."""
        self.throttled = throttle_ms > 0
        if not throttle_ms or self.transport is None or self.transport.is_closing():
            return
        clock = self.broker.clock
        until = clock.now_ms() + throttle_ms
        if self._muted is not None:
            if until <= self._muted_until_ms:
                return
            self._muted.cancel()
        elif not self._reading_paused:
            self.transport.pause_reading()
        self._muted_until_ms = until
        self._muted = clock.call_at(until, self._unmute)

    def _unmute(self) -> None:
        self._muted = None
        if self.transport is None or self.transport.is_closing():
            return
        if not self._reading_paused:
            self.transport.resume_reading()
        self._start_requests()

    async def _authenticate(self, request: Request | sasl.RawToken) -> bytes | None:
        auth = self._auth
        assert auth is not None
        try:
            frame = await auth.step(request)
        finally:
            self._auth_step = None
        if auth.complete:
            # Authenticated: the principal goes on every later request's context (for ACLs).
            self._context.principal = auth.principal
            self._auth = None
            self.decoder.max_frame_bytes = self.broker.config["socket.request.max.bytes"]
            # Frames read behind the last bare token (a v0 handshake) are the first requests.
            try:
                self._waiting = collections.deque(
                    decode_request(r.token, self.broker.supported_versions) if isinstance(r, sasl.RawToken) else r
                    for r in self._waiting)
            except ProtocolError as exc:
                self._protocol_error(exc)
                return None
        asyncio.get_running_loop().call_soon(self._start_requests)
        return frame or None

    def _close_after_failed_authentication(self) -> None:
        """As Kafka: the answer is written, then the connection closes after
        connection.failed.authentication.delay.ms (a guessing client is slowed down)."""
        if not self._reading_paused and not self.transport.is_closing():
            self._set_reading_paused(True)
        delay = self.broker.config["connection.failed.authentication.delay.ms"] / 1000
        asyncio.get_running_loop().call_later(delay, self.transport.close)

    # -- responses --------------------------------------------------------------------------

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _protocol_error(self, exc: ProtocolError) -> None:
        metrics.PROTOCOL_ERRORS.labels(type(exc).__name__).inc()
        log.warning("connection_closed_protocol_error", peer=str(self.peer), error=str(exc))
        # Only this connection goes; responses not yet written are dropped with it.
        self.transport.abort()

    def _write(self, frame: bytes | OutboundFrame) -> None:
        # A fetch's frame is several buffers (its large records as the log read them): each is
        # written as it is (3.11's writelines would join them into one copy).
        if type(frame) is OutboundFrame:
            frame.write_to(self.transport)
        else:
            self.transport.write(frame)

    async def _write_responses(self) -> None:
        pending = self._pending
        while True:
            if not pending:
                self._has_pending.clear()
                await self._has_pending.wait()
                continue
            task = pending[0]
            if task is None:  # end of input
                self.transport.close()
                return
            try:
                frame = await task
            except ProtocolError as exc:
                self._protocol_error(exc)
                return
            except Exception:
                log.exception("response_failed", peer=str(self.peer))
                self.transport.abort()
                return
            pending.popleft()
            if frame is not None:
                self._held -= len(frame)
                if self.broker.quotas.any:  # sending is request time too (Kafka's network thread)
                    started = time.perf_counter()
                    self._write(frame)
                    self._charge(time.perf_counter() - started)
                else:
                    self._write(frame)
            if self._auth is not None and self._auth.state is sasl.State.FAILED and not pending:
                self._close_after_failed_authentication()
                return
            if self._waiting:
                self._start_requests()
            if not self._can_write.is_set():
                await self._can_write.wait()
