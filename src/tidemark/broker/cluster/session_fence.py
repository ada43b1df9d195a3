"""The group coordinator fenced by the broker's ZooKeeper session lease (ZkSession.may_lead).

A broker cut off from ZooKeeper, or paused past its session, is replaced as the offsets
partitions' leader by the controller, and the new coordinator acknowledges commits this one
never sees; Kafka's old leader fails writes only through its shrunken ISR and would still
answer reads from its cache. Here the coordinator answers neither: from the moment the lease
ends (the connection suspended, the session lost, or no round trip answered within 2/3 of the
session timeout) every read and write is answered NOT_COORDINATOR and every shard this broker
leads unloads. Once the lease is held again, each such partition is loaded afresh from the log,
as a new leadership, if ZooKeeper's current state still names this broker its leader at the
same epoch, written after its current registration; any other outcome comes through the view.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import KazooException

from tidemark.cluster.zk.leadership_check import read_held
from tidemark.records.offsets_schema import OFFSETS_TOPIC

if TYPE_CHECKING:
    from tidemark.broker.cluster.tasks import BackgroundTasks
    from tidemark.cluster.zk.session import ZkSession
    from tidemark.coordinator.group_coordinator import GroupCoordinator
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.cluster")

RELEAD_RETRY_S = 1.0  # after a failed read of the states, while the lease holds


class CoordinatorFence:
    def __init__(self, node_id: int, session: ZkSession, coordinator: GroupCoordinator,
                 replicas: PartitionManager, tasks: BackgroundTasks) -> None:
        self.node_id = node_id
        self.session = session
        self.coordinator = coordinator
        self.replicas = replicas
        self.tasks = tasks
        self.releads = 0  # leaderships loaded again after the lease came back (tests, status)
        coordinator.may_lead = session.may_lead
        session.on_fence(self._fence_changed)

    def _fence_changed(self, fenced: bool) -> None:
        if fenced:
            self.coordinator.fence()
        elif self.coordinator.fenced_leaderships():
            self.tasks.spawn(self._relead(), "coordinator-relead")

    async def _relead(self) -> None:
        while True:
            fenced = self.coordinator.fenced_leaderships()
            if not fenced or not self.session.may_lead():  # the next lease tries again
                return
            try:
                held = await self.session.call(read_held, self.session.client, self.node_id, OFFSETS_TOPIC,
                                               sorted(fenced))
                break
            except KazooException as exc:
                log.warning("coordinator_relead_failed", error=repr(exc))
                await asyncio.sleep(RELEAD_RETRY_S)
        for index, epoch in fenced.items():
            partition = self.replicas.partition(OFFSETS_TOPIC, index)
            if held.holds(self.node_id, index, epoch) and partition is not None and partition.is_leader \
                    and partition.leader_epoch == epoch:
                self.releads += 1
                self.coordinator.relead(index, epoch)
            else:  # the view brings whatever replaced it
                log.info("coordinator_leadership_not_held", partition=index, epoch=epoch,
                         registered=held.registered, state=repr(held.states.get(index)))
