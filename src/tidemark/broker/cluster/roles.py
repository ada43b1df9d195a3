"""Applying the cluster's view to this broker's replicas, on the event loop, in order.

For each partition assigned here: the leader of the latest epoch becomes leader (its followers
start as caught up), every other replica follows the leader it names, through one ReplicaFetcher
per leader broker. Only the partitions the view reports changed are visited (O(partitions
changed) per change); the first application after start visits them all.

The offsets topic's shards move with leadership: a broker that newly leads a partition loads
its shard; the same leader at a higher epoch (an ISR change by the controller, a follower's
restart) only moves the shard's epoch, and the shard keeps serving.

A broker takes a leadership only from a state written after its current registration (Kafka's
broker takes it only from the LeaderAndIsr its controller sends after seeing it start, KIP-380):
a state from before may be one the controller wrote before this broker restarted (after a power
loss its log may lack what it acknowledged then), and the controller, seeing the new
registration, moves or gives that leadership again in a new state (leader_election's
`registrations`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import structlog

from tidemark import metrics
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, TopicPartition
from tidemark.cluster.zk.zk_data import PartitionState
from tidemark.replication.errors import NotLeaderOrFollowerError
from tidemark.broker.security import client as security_client
from tidemark.replication.replica_fetcher import ReplicaFetcher

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.coordinator.runtime.io import Clock
    from tidemark.coordinator.group_coordinator import GroupCoordinator
    from tidemark.cluster.zk.metadata_view import PartitionView
    from tidemark.replication.partition import Partition
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.cluster")


def leads_from(state: PartitionState | None, registration_czxid: int | None) -> bool:
    """Whether a broker registered at `registration_czxid` takes the leadership `state` gives it:
    only if the state was written after that registration (unknown on either side: yes)."""
    if state is None or registration_czxid is None or state.mzxid < 0:
        return True
    return state.mzxid > registration_czxid


class ReplicaRoles:
    def __init__(self, config: BrokerConfig, replicas: PartitionManager, coordinator: GroupCoordinator, clock: Clock,
                 address: Callable[[int], tuple[str, int] | None],
                 registration_czxid: Callable[[], int | None] = lambda: None) -> None:
        self.config = config
        self._registration_czxid = registration_czxid
        self.node_id = config.node_id
        self.replicas = replicas
        self.coordinator = coordinator
        self.clock = clock
        self._address = address
        self._fetchers: dict[int, ReplicaFetcher] = {}

    def apply(self, snapshot: ClusterSnapshot, changed: Iterable[TopicPartition] | None, topics_changed: bool) -> int:
        """Bring the partitions in `changed` (None: every partition) in line with `snapshot`;
        answers how many were visited."""
        if topics_changed or changed is None:
            self._apply_topics(snapshot)
        keys = snapshot.partitions.keys() if changed is None else changed
        now = self.clock.now_ms()
        visited = 0
        for key in keys:
            view = snapshot.partitions.get(key)
            partition = self.replicas.partition(*key)
            visited += 1
            if partition is None or view is None or view.state is None:
                continue
            self._apply_partition(partition, view, now)
        return visited

    def _apply_topics(self, snapshot: ClusterSnapshot) -> None:
        changed, gone = self.replicas.metadata.update(snapshot.topics, snapshot.topic_configs)
        for topic in changed:
            self.replicas.host(topic)
        for name in gone:
            for partition in [p for (t, _), p in self.replicas.partitions.items() if t == name]:
                self.stop_following(partition)
            self.replicas.remove_local_topic(name)

    def _apply_partition(self, partition: Partition, view: PartitionView, now: int) -> None:
        topic, index = view.topic, view.partition
        replicas, isr_now = tuple(view.replicas), frozenset(view.isr)
        if view.leader == self.node_id:
            if not partition.is_leader or partition.leader_epoch < view.leader_epoch:
                if not leads_from(view.state, self._registration_czxid()):
                    log.info("leadership_from_before_registration_ignored", topic=topic, partition=index,
                             epoch=view.leader_epoch)
                    return  # the controller gives it again once it sees this registration
                newly_leading = not partition.is_leader
                if not partition.become_leader(view.leader_epoch, replicas, isr_now, view.zk_version, now):
                    return  # a stale view (an epoch not above the partition's): nothing changes
                self.stop_following(partition)
                self.replicas.schedule_flush(partition)
                log.info("became_leader", topic=topic, partition=index, epoch=view.leader_epoch)
                if newly_leading:
                    metrics.LEADER_ELECTIONS.inc()
                    self.coordinator.partition_led(topic, index, view.leader_epoch)
                else:  # the same leader at a higher epoch: the shard serves on
                    self.coordinator.partition_leader_epoch(topic, index, view.leader_epoch)
            elif view.zk_version > partition.zk_version:
                partition.update_isr(isr_now, view.zk_version)  # the controller changed it
                self.replicas.schedule_flush(partition)
        elif partition.leader_id != view.leader or partition.leader_epoch != view.leader_epoch or partition.is_leader:
            if not partition.become_follower(view.leader if view.leader >= 0 else None, view.leader_epoch, replicas,
                                             isr_now, view.zk_version):
                return  # a stale or conflicting view: the partition keeps the leadership it has
            self.stop_following(partition)
            self.coordinator.partition_followed(topic, index, view.leader_epoch)
            if view.leader >= 0:
                self._fetcher(view.leader).add(partition)
        else:
            partition.isr, partition.zk_version = isr_now, view.zk_version

    def session_lost(self) -> None:
        """The ZooKeeper session expired: what waits for replication on a partition led here is
        answered NOT_LEADER_OR_FOLLOWER (the controller may be moving its leadership now)."""
        for partition in list(self.replicas.partitions.values()):
            if partition.is_leader:
                partition.fail_waiters(NotLeaderOrFollowerError(
                    f"{partition.topic}-{partition.index}: broker {self.node_id} lost its ZooKeeper session"))

    def stop_following(self, partition: Partition) -> None:
        for fetcher in self._fetchers.values():
            fetcher.remove(partition)

    def _fetcher(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = ReplicaFetcher(
                self.node_id, leader_id, lambda: self._address(leader_id), append=self.replicas.append_as_follower,
                sync_truncations=self.replicas.sync_truncations, move_log_start=self.replicas.delete_records,
                max_wait_ms=self.config["replica.fetch.wait.max.ms"], max_bytes=self.config["replica.fetch.max.bytes"],
                backoff_ms=self.config["replica.fetch.backoff.ms"], opener=security_client.opener(self.config))
            fetcher.start()
            self._fetchers[leader_id] = fetcher
        return fetcher

    async def close(self) -> None:
        await asyncio.gather(*(fetcher.stop() for fetcher in self._fetchers.values()))
        self._fetchers.clear()
