"""A broker's place in a ZooKeeper cluster (zookeeper.connect set): its registration, its part
in the controller election, and acting on the cluster's state as ZooKeeper holds it.

Brokers learn leadership by watching the partition state znodes (cluster/zk/metadata_view.py),
not from controller requests: every change of the view is applied on the broker's event loop,
in order. For each partition assigned here: the leader of the latest epoch becomes leader (its
followers start as caught up), every other replica follows the leader it names, through one
ReplicaFetcher per leader broker. Leader epochs on every replica fetch refuse whoever acts on a
stale view. As leader, the broker shrinks and expands its partitions' ISRs itself, with writes
conditional on the state znode's version (ZooKeeper-era Kafka's Partition.shrinkIsr/expandIsr).
SIGTERM is a controlled shutdown: the controller moves this broker's leaderships away first.
"""

from __future__ import annotations

import asyncio
import faulthandler
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from kazoo.exceptions import KazooException, NoNodeError
from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.broker.config import validate_topic_configs
from tidemark.broker.offset_fetch_forwarding import OffsetFetchForwarder
from tidemark.replication.replica_fetcher import ReplicaFetcher
from tidemark.cluster.zk import isr, preferred_election, session, shutdown, topic_admin, zk_data
from tidemark.cluster.zk.config_changes import ConfigChangeListener
from tidemark.cluster.zk.controller import Controller
from tidemark.cluster.zk.errors import (
    ClusterError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicError,
)
from tidemark.cluster.zk.metadata_view import EMPTY, ClusterSnapshot, ZkMetadataView
from tidemark.cluster.zk.registration import BrokerRegistration
from tidemark.cluster.zk.topic_table import ZkTopicTable
from tidemark.records.offsets_schema import OFFSETS_TOPIC

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from tidemark.broker.config import BrokerConfig
    from tidemark.coordinator.group_coordinator import GroupCoordinator
    from tidemark.replication.partition import Partition
    from tidemark.replication.partition_manager import PartitionManager
    from tidemark.broker.coordinator_io import Clock

log = structlog.get_logger("tidemark.cluster")

T = TypeVar("T")
ISR_CHECK_MIN_MS = 100
CLOSE_TIMEOUT_S = 10.0  # after the controlled shutdown: fetchers, ISR loop, controller, session
# tidemark's default for the offsets topic (Kafka has none): with 3 or more replicas a commit
# needs 2 in sync, so no lone replica ever acknowledges one.
OFFSETS_MIN_INSYNC_FROM_RF = 3
OFFSETS_MIN_INSYNC_REPLICAS = 2


class ClusterLink:
    def __init__(self, config: BrokerConfig, replicas: PartitionManager, coordinator: GroupCoordinator,
                 clock: Clock) -> None:
        self.config = config
        self.replicas = replicas
        self.coordinator = coordinator
        self.clock = clock
        self.node_id = config.node_id
        self.client: KazooClient | None = None
        self.snapshot: ClusterSnapshot = EMPTY
        self._view: ZkMetadataView | None = None
        self._registration: BrokerRegistration | None = None
        self._controller: Controller | None = None
        self._config_changes: ConfigChangeListener | None = None
        self._config_reloads = asyncio.Lock()
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.changed = asyncio.Event()  # set at every applied view change (handlers wait on it)
        self._started = False  # the partition manager is open: view changes can be applied
        self._stopping = False  # leaderships handed away: no new fetcher, no role change any more
        # OffsetFetch forwarding to the group's coordinator (offsets.fetch.forward.enable).
        self.offset_fetch_forwarder = OffsetFetchForwarder(self._address, config["request.timeout.ms"]) \
            if config["offsets.fetch.forward.enable"] else None

    async def _blocking(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A kazoo call off the event loop."""
        return await asyncio.to_thread(functools.partial(call, *args, **kwargs))

    # -- lifecycle --------------------------------------------------------------------------------

    async def connect(self) -> ZkTopicTable:
        """The ZooKeeper session and the topic registry the partition manager opens with."""
        self._loop = asyncio.get_running_loop()
        self.client = await self._blocking(session.connect, self.config["zookeeper.connect"],
                                           self.config["zookeeper.session.timeout.ms"])
        self._view = ZkMetadataView(self.client, on_change=self._changed_in_kazoo_thread)
        await self._blocking(self._view.start)
        self.snapshot = self._view.snapshot
        table = await self._blocking(ZkTopicTable, self.client, self.node_id, validate_topic_configs)
        table.update(self.snapshot.topics)
        return table

    async def start(self, host: str, port: int) -> None:
        """Register (the port is known now), stand for controller, and act on the current view."""
        assert self.client is not None
        self._registration = BrokerRegistration(self.client, zk_data.BrokerInfo(self.node_id, host, port),
                                                wait_for_owner_s=self.config["zookeeper.session.timeout.ms"] / 1000)
        await self._blocking(self._registration.register)
        self._controller = Controller(self.client, self.node_id)
        await self._blocking(self._controller.start)
        self._started = True
        self._apply(self._view.snapshot if self._view else self.snapshot)
        self._config_changes = ConfigChangeListener(self.client, self._config_changed_in_kazoo_thread)
        await self._blocking(self._config_changes.start)
        try:  # serve once the view shows this broker and a controller (clients ask for both)
            await self.wait_for(lambda s: s.controller_id >= 0 and self.node_id in s.brokers)
        except TimeoutError:
            log.warning("cluster_view_incomplete", controller=self.snapshot.controller_id)
        self._spawn(self._maintain_isrs(), "isr-maintenance")

    async def stop(self) -> None:
        """Controlled shutdown: the controller moves this broker's leaderships away, then leave."""
        timeout_s = self.config["controlled.shutdown.timeout.ms"] / 1000
        if self.client is not None and self._registration is not None:
            try:  # bounded even when ZooKeeper is gone (kazoo would retry forever)
                handled = await asyncio.wait_for(self._blocking(
                    shutdown.request_controlled_shutdown, self.client, self.node_id, timeout_s), timeout_s + 1)
            except (TimeoutError, KazooException) as exc:  # e.g. the session expired just now: stop anyway
                log.warning("controlled_shutdown_failed", broker=self.node_id, error=repr(exc))
                handled = False
            log.info("controlled_shutdown", broker=self.node_id, handled=handled)
        self._stopping = True
        faulthandler.dump_traceback_later(CLOSE_TIMEOUT_S)  # a thread's watchdog: fires even if the loop is stuck
        try:
            await asyncio.wait_for(self._close(), CLOSE_TIMEOUT_S)
        except TimeoutError:
            # Seen rarely and not understood yet: leave the stacks in the log, and stop anyway.
            log.warning("cluster_close_timed_out", seconds=CLOSE_TIMEOUT_S)
            faulthandler.dump_traceback(all_threads=True)
            for task in asyncio.all_tasks():
                task.print_stack()
        finally:
            faulthandler.cancel_dump_traceback_later()

    async def _close(self) -> None:
        """Stop fetching and maintaining ISRs, resign, and close the ZooKeeper session."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.offset_fetch_forwarder is not None:
            await self.offset_fetch_forwarder.close()
        await asyncio.gather(*(fetcher.stop() for fetcher in self._fetchers.values()))
        self._fetchers.clear()
        if self._view is not None:
            self._view.on_change = None
        if self._config_changes is not None:
            self._config_changes.close()
        # The controller first (closing interrupts its retries), while the session still works.
        for part in (self._controller, self._registration):
            if part is not None:
                await self._blocking(part.close)
        if self.client is not None:
            await self._blocking(self.client.stop)
            await self._blocking(self.client.close)

    def _spawn(self, coroutine: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the view -------------------------------------------------------------------------------

    def _changed_in_kazoo_thread(self, snapshot: ClusterSnapshot) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._apply, snapshot)

    def _apply(self, snapshot: ClusterSnapshot) -> None:
        """Bring this broker's partitions in line with the cluster's state (on the event loop)."""
        if self._view is not None and snapshot is not self._view.snapshot:
            snapshot = self._view.snapshot  # a later change is queued: apply the newest once
        self.snapshot = snapshot
        if not self._started or self._stopping:
            return
        table = self.replicas.metadata
        changed, gone = table.update(snapshot.topics)
        for topic in changed:
            self.replicas.host(topic)
        for name in gone:
            local = [p for (t, _), p in self.replicas.partitions.items() if t == name]
            for partition in local:
                self._stop_following(partition)
            self.replicas.remove_local_topic(name)
        now = self.clock.now_ms()
        for (topic, index), view in snapshot.partitions.items():
            partition = self.replicas.partition(topic, index)
            if partition is None or view.state is None:
                continue
            replicas, isr_now = tuple(view.replicas), frozenset(view.isr)
            if view.leader == self.node_id:
                if not partition.is_leader or partition.leader_epoch != view.leader_epoch:
                    self._stop_following(partition)
                    partition.become_leader(view.leader_epoch, replicas, isr_now, view.zk_version, now)
                    self.replicas.schedule_flush(partition)
                    log.info("became_leader", topic=topic, partition=index, epoch=view.leader_epoch)
                    metrics.LEADER_ELECTIONS.inc()
                    self.coordinator.partition_led(topic, index, view.leader_epoch)
                elif view.zk_version > partition.zk_version:
                    partition.update_isr(isr_now, view.zk_version)  # the controller changed it
                    self.replicas.schedule_flush(partition)
            elif partition.leader_id != view.leader or partition.leader_epoch != view.leader_epoch \
                    or partition.is_leader:
                self._stop_following(partition)
                partition.become_follower(view.leader if view.leader >= 0 else None, view.leader_epoch, replicas,
                                          isr_now, view.zk_version)
                self.coordinator.partition_followed(topic, index, view.leader_epoch)
                if view.leader >= 0:
                    self._fetcher(view.leader).add(partition)
            else:
                partition.isr, partition.zk_version = isr_now, view.zk_version
        self.changed.set()
        self.changed = asyncio.Event()

    def _config_changed_in_kazoo_thread(self, topic: str) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._spawn, self._reload_topic_configs(topic), f"configs-{topic}")

    async def _reload_topic_configs(self, name: str) -> None:
        """Another broker changed the topic's configs: take them (produce checks read them from
        the topic's metadata, the logs get their new config)."""
        async with self._config_reloads:  # in the notices' order: the newest read is applied last
            table = self.replicas.metadata
            try:
                configs = await self._blocking(table.read_configs, name)
            except KazooException as exc:
                log.warning("topic_configs_not_reloaded", topic=name, error=repr(exc))
                return
            topic = table.use_configs(name, configs)
            if topic is not None:
                self.replicas.apply_topic_configs(topic)
                log.info("topic_configs_reloaded", topic=name, configs=configs)

    def _stop_following(self, partition: Partition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(partition)

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.node_id, leader_id, lambda: self._address(leader_id), append=self.replicas.append_as_follower,
                move_log_start=self.replicas.delete_records,
                max_wait_ms=self.config["replica.fetch.wait.max.ms"], max_bytes=self.config["replica.fetch.max.bytes"],
                backoff_ms=self.config["replica.fetch.backoff.ms"])
            fetcher.start()
            self._fetchers[leader_id] = fetcher
        return fetcher

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.snapshot.brokers.get(broker_id)
        return (broker.host, broker.port) if broker is not None else None

    # -- ISR maintenance --------------------------------------------------------------------------

    async def _maintain_isrs(self) -> None:
        """Shrink the ISRs of led partitions by followers not caught up for
        replica.lag.time.max.ms; expand them by followers that caught up."""
        lag_ms = self.config["replica.lag.time.max.ms"]
        interval_s = max(min(lag_ms // 2, 1000), ISR_CHECK_MIN_MS) / 1000
        while True:
            await asyncio.sleep(interval_s)
            now = self.clock.now_ms()
            under_replicated = max_lag = 0
            for partition in list(self.replicas.partitions.values()):
                if not partition.is_leader or len(partition.replicas) < 2:
                    continue
                wanted = partition.isr_to_shrink(now, lag_ms) or partition.isr_to_expand()
                if wanted is not None:
                    await self._write_isr(partition, wanted)
                under_replicated += len(partition.isr) < len(partition.replicas)
                end = partition.log.log_end_offset
                max_lag = max([max_lag] + [end - max(f.log_end_offset, 0) for f in partition.followers.values()])
            metrics.UNDER_REPLICATED_PARTITIONS.set(under_replicated)
            metrics.REPLICA_MAX_LAG.set(max_lag)

    async def _write_isr(self, partition: Partition, wanted: frozenset[int]) -> None:
        assert self.client is not None
        epoch, version = partition.leader_epoch, partition.zk_version
        try:
            written = await self._blocking(isr.alter_isr, self.client, self.node_id, partition.topic,
                                           partition.index, epoch, sorted(wanted), version)
        except ClusterError as exc:
            log.info("isr_write_refused", topic=partition.topic, partition=partition.index, error=str(exc))
            return  # the view brings the state that won
        if partition.is_leader and partition.leader_epoch == epoch:
            shrunk = len(written.isr) < len(partition.isr)
            (metrics.ISR_SHRINKS if shrunk else metrics.ISR_EXPANDS).inc()
            partition.update_isr(frozenset(written.isr), written.zk_version)
            self.replicas.schedule_flush(partition)
            log.info("isr_shrunk" if shrunk else "isr_expanded", topic=partition.topic, partition=partition.index,
                     isr=list(written.isr))

    # -- topic administration (CreateTopics, CreatePartitions, DeleteTopics from any broker) -----

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, tuple[int, ...]] | None = None) -> zk_data.TopicAssignment:
        assert self.client is not None
        created = await self._blocking(topic_admin.create_topic, self.client, name, partitions,
                                       replication_factor, configs, assignment=assignment)
        await self.wait_for(lambda s: _has_states(s, name, partitions))
        return created

    async def add_partitions(self, name: str, count: int) -> None:
        assert self.client is not None
        await self._blocking(topic_admin.add_partitions, self.client, name, count)
        await self.wait_for(lambda s: _has_states(s, name, count))

    async def delete_topic(self, name: str) -> None:
        assert self.client is not None
        await self._blocking(topic_admin.delete_topic, self.client, name)
        await self.wait_for(lambda s: name not in s.topics)

    async def wait_for(self, condition: Callable[[ClusterSnapshot], bool], timeout_s: float | None = None) -> None:
        """Until the applied view satisfies `condition`, at most timeout_s (request.timeout.ms
        by default): TimeoutError."""
        if timeout_s is None:
            timeout_s = self.config["request.timeout.ms"] / 1000
        async with asyncio.timeout(timeout_s):
            while not condition(self.snapshot):
                await self.changed.wait()

    async def elect_preferred_leaders(self, partitions: list[tuple[str, int]],
                                      timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        """ElectLeaders (PREFERRED): the controller moves each partition's leadership to its
        preferred replica where it is alive and in the ISR. Answers Kafka's error per partition,
        once this broker's view shows the new leaders (REQUEST_TIMED_OUT after timeout_s)."""
        assert self.client is not None
        deadline = asyncio.get_running_loop().time() + timeout_s
        results: dict[tuple[str, int], ErrorCode] = {}
        wanted = []
        for key in partitions:
            view = self.snapshot.partitions.get(key)
            if view is None or view.state is None:
                results[key] = ErrorCode.unknown_topic_or_partition
            elif view.leader == view.replicas[0]:
                results[key] = ErrorCode.election_not_needed
            else:
                wanted.append(key)
        if not wanted:
            return results
        handled = await self._blocking(preferred_election.request_preferred_election, self.client, wanted, timeout_s)
        if not handled:
            return {**results, **{key: ErrorCode.request_timed_out for key in wanted}}
        # The controller wrote the states before it deleted the request: read them, as the
        # outcome, from ZooKeeper (this broker's view may not have them yet).
        states = await self._blocking(lambda: {key: _read_state(self.client, *key) for key in wanted})
        elected = {}
        for key, state in states.items():
            view = self.snapshot.partitions.get(key)
            if state is None or view is None:
                results[key] = ErrorCode.unknown_topic_or_partition
            elif state.leader == view.replicas[0]:
                results[key] = ErrorCode.none
                elected[key] = state.leader_epoch
            else:
                results[key] = ErrorCode.preferred_leader_not_available
        try:
            await self.wait_for(lambda s: all((v := s.partitions.get(key)) is None or v.leader_epoch >= epoch
                                              for key, epoch in elected.items()),
                                max(0.0, deadline - asyncio.get_running_loop().time()))
        except TimeoutError:
            return {**results, **{key: ErrorCode.request_timed_out for key in elected}}
        return results

    def live_brokers(self) -> list[zk_data.BrokerInfo]:
        return [self.snapshot.brokers[b] for b in sorted(self.snapshot.brokers)]

    # -- what handlers ask ------------------------------------------------------------------------

    def leader_of(self, topic: str, partition: int) -> zk_data.BrokerInfo | None:
        view = self.snapshot.partitions.get((topic, partition))
        return self.snapshot.brokers.get(view.leader) if view is not None else None

    async def ensure_offsets_topic(self) -> ErrorCode | None:
        """Create __consumer_offsets on first use with offsets.topic.replication.factor replicas
        (Kafka: COORDINATOR_NOT_AVAILABLE until that many brokers are alive), and
        min.insync.replicas=2 from 3 replicas on; None once it exists."""
        if OFFSETS_TOPIC in self.snapshot.topics:
            return None
        replication_factor = self.config["offsets.topic.replication.factor"]
        configs = {"cleanup.policy": "compact", "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        if replication_factor >= OFFSETS_MIN_INSYNC_FROM_RF:
            configs["min.insync.replicas"] = str(OFFSETS_MIN_INSYNC_REPLICAS)
        try:
            await self.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], replication_factor,
                                    configs)
        except TopicExistsError:
            await self.wait_for(lambda s: OFFSETS_TOPIC in s.topics)
        except (InvalidReplicationFactorError, TimeoutError) as exc:
            log.info("offsets_topic_not_created", error=str(exc))
            return ErrorCode.coordinator_not_available
        return None


def _has_states(snapshot: ClusterSnapshot, topic: str, partitions: int) -> bool:
    """Whether the controller has created the state of each of the topic's first partitions."""
    return all((view := snapshot.partitions.get((topic, p))) is not None and view.state is not None
               for p in range(partitions))


def _read_state(client: KazooClient, topic: str, partition: int) -> zk_data.PartitionState | None:
    try:
        data, stat = client.get(zk_data.partition_state_path(topic, partition))
    except NoNodeError:
        return None
    return zk_data.decode_partition_state(data, stat.version)


def cluster_error_code(exc: BaseException) -> ErrorCode:
    """How a failed topic administration reaches the client (Kafka's error for each)."""
    if isinstance(exc, TopicExistsError):
        return ErrorCode.topic_already_exists
    if isinstance(exc, InvalidReplicationFactorError):
        return ErrorCode.invalid_replication_factor
    if isinstance(exc, InvalidPartitionsError):
        return ErrorCode.invalid_partitions
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, TimeoutError):
        return ErrorCode.request_timed_out
    return ErrorCode.unknown_server_error
