"""Topic config changes reach every broker as in ZooKeeper-era Kafka: the writer sets
/config/topics/T and creates a sequential /config/changes/config_change_NNNNNNNNNN
({"version":2,"entity_path":"topics/T"}) in one multi; every broker watches /config/changes,
re-reads the config of each entity named by a notice it has not handled yet, and purges notices
older than Kafka's 15 minutes (ZkConfigChangeNotificationListener)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from tidemark.cluster.zk import zk_data

log = logging.getLogger(__name__)

NOTICE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs


def set_topic_config(client: KazooClient, topic: str, configs: Mapping[str, str]) -> None:
    """Store a topic's overrides and tell every broker, atomically."""
    transaction = client.transaction()
    transaction.set_data(zk_data.topic_config_path(topic), zk_data.encode_topic_config(configs))
    transaction.create(zk_data.config_change_path(), zk_data.encode_topic_config_change(topic), sequence=True)
    failure = next((r for r in transaction.commit() if isinstance(r, Exception)), None)
    if failure is not None:
        raise failure


def _sequence(child: str) -> int:
    return int(child[len(zk_data.CONFIG_CHANGE_PREFIX):])


class ConfigChangeListener:
    """Calls `on_topic_change(topic)` in kazoo's thread for each notice not seen yet, in order
    (every notice present at start too: a change made while the broker was reading is not lost)."""

    def __init__(self, client: KazooClient, on_topic_change: Callable[[str], None]) -> None:
        self.client = client
        self.on_topic_change = on_topic_change
        self._last = -1  # the sequence of the last notice handled
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        self.client.ensure_path(zk_data.CONFIG_CHANGES)
        ChildrenWatch(self.client, zk_data.CONFIG_CHANGES, self._changed)

    def close(self) -> None:
        self._closed = True

    def _changed(self, children: list[str]) -> Any:
        if self._closed:
            return False
        with self._lock:
            now = time.time() * 1000
            for child in sorted((c for c in children if c.startswith(zk_data.CONFIG_CHANGE_PREFIX)), key=_sequence):
                path = f"{zk_data.CONFIG_CHANGES}/{child}"
                try:
                    data, stat = self.client.get(path)
                except NoNodeError:
                    continue
                if _sequence(child) > self._last:
                    self._last = _sequence(child)
                    entity_type, name = zk_data.decode_config_change(data)
                    if entity_type == "topics":
                        self.on_topic_change(name)
                if now - stat.ctime > NOTICE_EXPIRATION_MS:
                    try:
                        self.client.delete(path)
                    except NoNodeError:
                        pass  # another broker purged it
        return None
