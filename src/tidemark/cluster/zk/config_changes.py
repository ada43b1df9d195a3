"""Config changes reach every broker as in ZooKeeper-era Kafka: the writer sets
/config/topics/T (or a broker entity's /config/brokers/<id or <default>>) and creates a
sequential /config/changes/config_change_NNNNNNNNNN ({"version":2,"entity_path":"topics/T"},
"brokers/<default>", "brokers/1"; client quotas' "users/alice/clients/app", "clients/app") in one multi; every broker watches /config/changes,
re-reads the config of each entity named by a notice it has not handled yet, and purges notices
older than Kafka's 15 minutes (ZkConfigChangeNotificationListener)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
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


def set_broker_config(client: KazooClient, entity: str, configs: Mapping[str, str]) -> None:
    """Store a broker entity's dynamic settings (a broker id or "<default>") and tell every
    broker, atomically; the entity's znode is created the first time."""
    client.ensure_path(zk_data.CONFIG_BROKERS)
    _set_with_notice(client, zk_data.broker_config_path(entity), configs,
                     zk_data.encode_broker_config_change(entity))


def read_broker_config(client: KazooClient, entity: str) -> dict[str, str]:
    return _read_config(client, zk_data.broker_config_path(entity))


def set_entity_config(client: KazooClient, entity_path: str, configs: Mapping[str, str]) -> None:
    """Store a client quota entity's config ("users/alice/clients/app" under /config) and tell
    every broker, atomically; the znode (and its parents) created the first time."""
    path = f"{zk_data.CONFIG}/{entity_path}"
    client.ensure_path(path.rsplit("/", 1)[0])
    _set_with_notice(client, path, configs, zk_data.encode_entity_config_change(entity_path))


def read_entity_config(client: KazooClient, entity_path: str) -> dict[str, str]:
    return _read_config(client, f"{zk_data.CONFIG}/{entity_path}")


def _set_with_notice(client: KazooClient, path: str, configs: Mapping[str, str], notice: bytes) -> None:
    """Set (or create) an entity's config znode and its /config/changes notice in one multi."""
    for attempt in range(2):  # another broker may create the znode between our look and our multi
        transaction = client.transaction()
        if client.exists(path):
            transaction.set_data(path, zk_data.encode_topic_config(configs))
        else:
            transaction.create(path, zk_data.encode_topic_config(configs))
        transaction.create(zk_data.config_change_path(), notice, sequence=True)
        failure = next((r for r in transaction.commit() if isinstance(r, Exception)), None)
        if failure is None:
            return
        if not isinstance(failure, (NodeExistsError, NoNodeError)) or attempt:
            raise failure


def _read_config(client: KazooClient, path: str) -> dict[str, str]:
    try:
        data, _stat = client.get(path)
    except NoNodeError:
        return {}
    return zk_data.decode_topic_config(data)


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError:
        return []


def read_client_quotas(client: KazooClient) -> dict[str, dict[str, str]]:
    """Every client quota entity's config, by entity path (entities without one left out)."""
    paths = [f"clients/{c}" for c in _children(client, zk_data.CONFIG_CLIENTS)]
    for user in _children(client, zk_data.CONFIG_USERS):
        paths.append(f"users/{user}")
        paths += [f"users/{user}/clients/{c}" for c in _children(client, f"{zk_data.CONFIG_USERS}/{user}/clients")]
    found = {path: read_entity_config(client, path) for path in paths}
    return {path: configs for path, configs in found.items() if configs}


def _sequence(child: str) -> int:
    return int(child[len(zk_data.CONFIG_CHANGE_PREFIX):])


class ConfigChangeListener:
    """Calls `on_topic_change(topic)` (or `on_broker_change(entity)`) in kazoo's thread for each
    notice not seen yet, in order (every notice present at start too: a change made while the
    broker was reading is not lost)."""

    def __init__(self, client: KazooClient, on_topic_change: Callable[[str], None],
                 on_broker_change: Callable[[str], None] | None = None,
                 on_quota_change: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.on_topic_change = on_topic_change
        self.on_broker_change = on_broker_change
        self.on_quota_change = on_quota_change  # given the entity path: "users/alice/clients/app"
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
                    elif entity_type == "brokers" and self.on_broker_change is not None:
                        self.on_broker_change(name)
                    elif entity_type in ("users", "clients") and self.on_quota_change is not None:
                        self.on_quota_change(f"{entity_type}/{name}")
                if now - stat.ctime > NOTICE_EXPIRATION_MS:
                    try:
                        self.client.delete(path)
                    except NoNodeError:
                        pass  # another broker purged it
        return None
