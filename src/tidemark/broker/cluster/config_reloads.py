"""Topic configs another broker changed (a /config/changes notice): read them from ZooKeeper
and hand them to the topic's metadata and logs (produce checks read them from there)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import KazooException

if TYPE_CHECKING:
    from tidemark.cluster.zk.session import ZkSession
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.cluster")


class ConfigReloads:
    def __init__(self, session: ZkSession, replicas: PartitionManager) -> None:
        self.session = session
        self.replicas = replicas
        self._lock = asyncio.Lock()

    async def reload(self, name: str) -> None:
        async with self._lock:  # in the notices' order: the newest read is applied last
            table = self.replicas.metadata
            try:
                configs = await self.session.call(table.read_configs, name)
            except KazooException as exc:
                log.warning("topic_configs_not_reloaded", topic=name, error=repr(exc))
                return
            topic = table.use_configs(name, configs)
            if topic is not None:
                self.replicas.apply_topic_configs(topic)
                log.info("topic_configs_reloaded", topic=name, configs=configs)
