"""A leader's ISR maintenance: shrink the ISRs of led partitions by followers not caught up for
replica.lag.time.max.ms, expand them by followers that caught up, with writes conditional on the
state znode's version (ZooKeeper-era Kafka's Partition.shrinkIsr/expandIsr). The high watermark
counts the ISR asked for from before the write (Partition.isr_write_pending, KIP-497).

The loop outlives ZooKeeper trouble: a failed or timed-out call, or a session that expired
under it, ends only that round; the loop waits for a connected session and goes on.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import KazooException

from tidemark import metrics
from tidemark.cluster.zk import isr
from tidemark.cluster.zk.errors import ClusterError

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.coordinator.runtime.io import Clock
    from tidemark.cluster.zk.session import ZkSession
    from tidemark.replication.partition import Partition
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.cluster")

ISR_CHECK_MIN_MS = 100


class IsrMaintenance:
    def __init__(self, config: BrokerConfig, session: ZkSession, replicas: PartitionManager, clock: Clock) -> None:
        self.node_id = config.node_id
        self.lag_ms = config["replica.lag.time.max.ms"]
        self.session = session
        self.replicas = replicas
        self.clock = clock

    async def run(self) -> None:
        interval_s = max(min(self.lag_ms // 2, 1000), ISR_CHECK_MIN_MS) / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.check()
            except KazooException as exc:  # a ZooKeeper call failed, timed out, or lost its session
                log.warning("isr_maintenance_zookeeper_failed", error=repr(exc))
                await self.session.wait_connected()

    async def check(self) -> None:
        """One round over the led partitions."""
        now = self.clock.now_ms()
        under_replicated = max_lag = 0
        for partition in list(self.replicas.partitions.values()):
            if not partition.is_leader or len(partition.replicas) < 2:
                continue
            wanted = (partition.isr_to_shrink(now, self.lag_ms) or partition.isr_to_expand()
                      or partition.isr_unconfirmed)  # a write with no answer: asked again
            if wanted is not None:
                await self._write_isr(partition, wanted)
            under_replicated += len(partition.isr) < len(partition.replicas)
            end = partition.log.log_end_offset
            max_lag = max([max_lag] + [end - max(f.log_end_offset, 0) for f in partition.followers.values()])
        metrics.UNDER_REPLICATED_PARTITIONS.set(under_replicated)
        metrics.REPLICA_MAX_LAG.set(max_lag)

    async def _write_isr(self, partition: Partition, wanted: frozenset[int]) -> None:
        epoch, version = partition.leader_epoch, partition.zk_version
        # Counted from now (KIP-497's maximal ISR): ZooKeeper may list `wanted` before the
        # answer comes back, or without it ever coming; the pending state lasts until this
        # leader learns the stored ISR (the answer below or the view), refused or failed alike.
        partition.isr_write_pending(wanted)
        try:
            written = await self.session.call(isr.alter_isr, self.session.client, self.node_id, partition.topic,
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
