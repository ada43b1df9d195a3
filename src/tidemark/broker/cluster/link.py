"""ClusterLink: a broker's place in a ZooKeeper cluster, as the broker and its handlers see it:
its registration, its part in the controller election, acting on the cluster's state as
ZooKeeper holds it (roles), its ISRs (isr_maintenance), and what it writes for clients (admin).

Brokers learn leadership by watching the partition state znodes (cluster/zk/metadata_view.py),
not from controller requests: every change of the view is applied on the broker's event loop,
in order. Leader epochs on every replica fetch refuse whoever acts on a stale view. SIGTERM is
a controlled shutdown: the controller moves this broker's leaderships away first.

Every ZooKeeper call goes through the broker's one ZkSession (its own threads, a timeout per
call), which the ZooKeeper offset store shares; nothing here blocks the event loop on ZooKeeper.
"""

from __future__ import annotations

import asyncio
import faulthandler
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import structlog
from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from tidemark.broker.cluster.admin import ClusterAdmin
from tidemark.broker.cluster.applied_view import AppliedView
from tidemark.broker.cluster.config_reloads import ConfigReloads
from tidemark.broker.cluster.isr_maintenance import IsrMaintenance
from tidemark.broker.cluster.roles import ReplicaRoles
from tidemark.broker.cluster.session_fence import CoordinatorFence
from tidemark.broker.cluster.tasks import BackgroundTasks, halt
from tidemark.broker.config import validate_topic_configs
from tidemark.broker.dynamic_config import BrokerConfigReloads
from tidemark.broker.offset_fetch_forwarding import OffsetFetchForwarder
from tidemark.cluster.zk import config_changes, producer_ids, shutdown, zk_data
from tidemark.cluster.zk.assignment import RackAwareMode
from tidemark.cluster.zk.config_changes import ConfigChangeListener
from tidemark.cluster.zk.controller import Controller
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, ZkMetadataView
from tidemark.cluster.zk.registration import BrokerRegistration
from tidemark.cluster.zk.session import ZkSession
from tidemark.cluster.zk.topic_table import ZkTopicTable
from tidemark.zk.offset_store import ZookeeperOffsetManager
from tidemark.broker.security import client as security_client
from tidemark.broker.security import listeners as security_listeners

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from tidemark.broker.config import BrokerConfig
    from tidemark.coordinator.runtime.io import Clock
    from tidemark.coordinator.group_coordinator import GroupCoordinator
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.cluster")

CLOSE_TIMEOUT_S = 10.0  # after the controlled shutdown: fetchers, ISR loop, controller, session
# Calls before the broker serves (the view's first reads, the controller's watches, the
# registration) may take longer than one request: they read the whole cluster.
STARTUP_CALL_TIMEOUT_S = 30.0


class ClusterLink:
    def __init__(self, config: BrokerConfig, replicas: PartitionManager, coordinator: GroupCoordinator,
                 clock: Clock, session: ZkSession | None = None,
                 on_fatal: Callable[[BaseException], None] = halt) -> None:
        self.config = config
        self.replicas = replicas
        self.node_id = config.node_id
        self.inter_broker_listener = security_listeners.inter_broker_listener_name(config) \
            if config["listeners"] else "PLAINTEXT"
        self.session = session if session is not None else ZkSession(
            config["zookeeper.connect"], config["zookeeper.session.timeout.ms"])
        self.view = AppliedView(config["request.timeout.ms"])
        self.roles = ReplicaRoles(config, replicas, coordinator, clock, self._address,
                                  lambda: self._registration.czxid if self._registration is not None else None)
        self.isr = IsrMaintenance(config, self.session, replicas, clock)
        self.admin = ClusterAdmin(config, self.session, self.view)
        self.config_reloads = ConfigReloads(self.session, replicas)
        self.broker_config_reloads = BrokerConfigReloads(config, self.session)
        self.quota_reload: Callable[[str], Awaitable[None]] | None = None  # the broker's client quotas
        self.tasks = BackgroundTasks(on_fatal)
        # The group coordinator serves only while the session's lease holds (session_fence.py).
        self.coordinator_fence = CoordinatorFence(self.node_id, self.session, coordinator, replicas, self.tasks)
        # Offsets in ZooKeeper (offsets.storage=zookeeper, OffsetCommit/OffsetFetch v0) on this
        # broker's session.
        self.offset_store = ZookeeperOffsetManager(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
                                                   client=self.session.client)
        self._metadata: ZkMetadataView | None = None
        self._registration: BrokerRegistration | None = None
        self._controller: Controller | None = None
        self._config_changes: ConfigChangeListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False  # the partition manager is open: view changes can be applied
        self._stopping = False  # leaderships handed away: no new fetcher, no role change any more
        self._producer_id_blocks = asyncio.Lock()  # one block claimed at a time
        self.partitions_visited = 0  # by the view changes applied so far: what they cost
        # OffsetFetch forwarding to the group's coordinator (offsets.fetch.forward.enable).
        self.offset_fetch_forwarder = OffsetFetchForwarder(self._address, config["request.timeout.ms"],
                                                           security_client.opener(config)) \
            if config["offsets.fetch.forward.enable"] else None

    @property
    def client(self) -> KazooClient:
        return self.session.client

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self.view.snapshot

    # -- lifecycle --------------------------------------------------------------------------------

    async def connect(self) -> ZkTopicTable:
        """The ZooKeeper session and the topic registry the partition manager opens with."""
        self._loop = asyncio.get_running_loop()
        await self.session.start(STARTUP_CALL_TIMEOUT_S)
        self.session.on_lost(self.roles.session_lost)
        self.offset_store.start()
        self._metadata = ZkMetadataView(self.client, on_change=self._changed_in_kazoo_thread)
        await self.session.call(self._metadata.start, timeout_s=STARTUP_CALL_TIMEOUT_S)
        self.view.publish(self._metadata.snapshot)
        table = await self.session.call(ZkTopicTable, self.client, self.node_id, validate_topic_configs,
                                        timeout_s=STARTUP_CALL_TIMEOUT_S)
        table.update(self.snapshot.topics, self.snapshot.topic_configs)
        await self.broker_config_reloads.load(STARTUP_CALL_TIMEOUT_S)  # before the logs open with them
        return table

    async def start(self, host: str, port: int, endpoints: list[str] | None = None,
                    protocol_map: dict[str, str] | None = None) -> None:
        """Register (the port is known now), stand for controller, and act on the current view.
        host and port: the inter-broker listener's advertised address; endpoints: every listener's."""
        self._registration = BrokerRegistration(self.client, zk_data.BrokerInfo(
            self.node_id, host, port, rack=self.config["broker.rack"], endpoints=tuple(endpoints or ()),
            protocol_map=tuple(sorted((protocol_map or {}).items()))),
                                                wait_for_owner_s=self.config["zookeeper.session.timeout.ms"] / 1000)
        await self.session.call(self._registration.register,
                                timeout_s=self._registration.wait_for_owner_s + STARTUP_CALL_TIMEOUT_S)
        self._controller = Controller(self.session, self.node_id)
        await self.session.call(self._controller.start, timeout_s=STARTUP_CALL_TIMEOUT_S)
        self._started = True
        self._apply(everything=True)
        self._config_changes = ConfigChangeListener(self.client, self._config_changed_in_kazoo_thread,
                                                    self._broker_config_changed_in_kazoo_thread,
                                                    self._quota_changed_in_kazoo_thread)
        await self.session.call(self._config_changes.start, timeout_s=STARTUP_CALL_TIMEOUT_S)
        try:  # serve once the view shows this broker and a controller (clients ask for both)
            await self.wait_for(lambda s: s.controller_id >= 0 and self.node_id in s.brokers)
        except TimeoutError:
            log.warning("cluster_view_incomplete", controller=self.snapshot.controller_id)
        self.tasks.spawn(self.isr.run(), "isr-maintenance")

    async def stop(self) -> None:
        """Controlled shutdown: the controller moves this broker's leaderships away, then leave."""
        timeout_s = self.config["controlled.shutdown.timeout.ms"] / 1000
        if self._registration is not None:
            try:  # bounded even when ZooKeeper is gone (kazoo would retry forever)
                handled = await self.session.call(shutdown.request_controlled_shutdown, self.client, self.node_id,
                                                  timeout_s, timeout_s=timeout_s + 1)
            except KazooException as exc:  # timed out, or the session expired just now: stop anyway
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
        await self.tasks.cancel_all()
        if self.offset_fetch_forwarder is not None:
            await self.offset_fetch_forwarder.close()
        await self.roles.close()
        if self._metadata is not None:
            self._metadata.on_change = None
        if self._config_changes is not None:
            self._config_changes.close()
        self.offset_store.close()
        # The controller first (closing interrupts its retries), while the session still works.
        for part in (self._controller, self._registration):
            if part is not None:
                try:
                    await self.session.call(part.close, timeout_s=CLOSE_TIMEOUT_S)
                except KazooException as exc:
                    log.warning("cluster_part_close_failed", part=type(part).__name__, error=repr(exc))
        await self.session.close()

    # -- the view -------------------------------------------------------------------------------

    def _changed_in_kazoo_thread(self, _snapshot: ClusterSnapshot) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._apply_or_halt)

    def _apply_or_halt(self) -> None:
        """A view change that cannot be applied leaves this broker acting on a stale view for
        good: as a dead task, it takes the broker down loudly."""
        try:
            self._apply()
        except Exception as exc:
            log.critical("cluster_view_not_applied", error=repr(exc), exc_info=exc)
            self.tasks.on_fatal(exc)

    def _apply(self, everything: bool = False) -> None:
        """Apply what changed in the view since the last application (on the event loop). Several
        changes queued meanwhile are applied at once, from the newest snapshot."""
        if self._metadata is None:
            return
        if not self._started:
            self.view.publish(self._metadata.snapshot)  # changes stay pending until start()
            return
        if self._stopping:
            return
        delta = self._metadata.take_changes()
        self.partitions_visited += self.roles.apply(delta.snapshot, None if everything else delta.partitions,
                                                    delta.topics_changed)
        self.view.publish(delta.snapshot)

    def _config_changed_in_kazoo_thread(self, topic: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.tasks.spawn, self.config_reloads.reload(topic), f"configs-{topic}")

    def _broker_config_changed_in_kazoo_thread(self, entity: str) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed() and self.broker_config_reloads.applies(entity):
            loop.call_soon_threadsafe(self.tasks.spawn, self.broker_config_reloads.reload(entity),
                                      f"broker-configs-{entity}")

    def _quota_changed_in_kazoo_thread(self, entity_path: str) -> None:
        loop, reload = self._loop, self.quota_reload
        if loop is not None and not loop.is_closed() and reload is not None:
            loop.call_soon_threadsafe(self.tasks.spawn, reload(entity_path), f"quotas-{entity_path}")

    def _address(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.snapshot.brokers.get(broker_id)
        if broker is None:
            return None
        # Replication goes over the inter-broker listener (its advertised address)
        return broker.address(self.inter_broker_listener) or (broker.host, broker.port)

    # -- what handlers ask ------------------------------------------------------------------------

    async def wait_for(self, condition: Callable[[ClusterSnapshot], bool], timeout_s: float | None = None) -> None:
        await self.view.wait_for(condition, timeout_s)

    def live_brokers(self) -> list[zk_data.BrokerInfo]:
        return [self.snapshot.brokers[b] for b in sorted(self.snapshot.brokers)]

    def leader_of(self, topic: str, partition: int) -> zk_data.BrokerInfo | None:
        view = self.snapshot.partitions.get((topic, partition))
        return self.snapshot.brokers.get(view.leader) if view is not None else None

    async def create_topic(self, name: str, partitions: int, replication_factor: int, configs: dict[str, str],
                           assignment: dict[int, tuple[int, ...]] | None = None,
                           rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED) -> zk_data.TopicAssignment:
        return await self.admin.create_topic(name, partitions, replication_factor, configs, assignment,
                                             rack_aware_mode)

    async def add_partitions(self, name: str, count: int) -> None:
        await self.admin.add_partitions(name, count)

    async def delete_topic(self, name: str) -> None:
        await self.admin.delete_topic(name)

    async def elect_preferred_leaders(self, partitions: list[tuple[str, int]],
                                      timeout_s: float) -> dict[tuple[str, int], ErrorCode]:
        return await self.admin.elect_preferred_leaders(partitions, timeout_s)

    async def ensure_offsets_topic(self) -> str | None:
        return await self.admin.ensure_offsets_topic()

    async def ensure_transaction_state_topic(self) -> ErrorCode | None:
        return await self.admin.ensure_transaction_state_topic()

    async def set_topic_configs(self, name: str, configs: dict[str, Any]) -> None:
        """AlterConfigs: /config/topics/T and its change notice written off the event loop (the
        other brokers reload them), then applied here at once."""
        await self.session.call(config_changes.set_topic_config, self.client, name, configs)
        topic = self.replicas.metadata.use_configs(name, configs)
        if topic is not None:
            self.replicas.apply_topic_configs(topic)
            log.info("topic_configs_altered", topic=name, configs=configs)

    async def next_producer_id(self) -> int:
        """InitProducerId's id: from this broker's block, a new block claimed in ZooKeeper off
        the event loop when it is used up (ZkCallTimeoutError when ZooKeeper does not answer)."""
        table = self.replicas.metadata
        async with self._producer_id_blocks:
            if not table.has_producer_id():
                start, end = await self.session.call(producer_ids.allocate_block, self.client, self.node_id)
                table.use_producer_id_block(start, end)
            return table.next_producer_id()
