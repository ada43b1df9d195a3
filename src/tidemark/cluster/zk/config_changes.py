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
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency
from kazoo.recipe.watchers import ChildrenWatch

from tidemark.cluster.zk import zk_data
from tidemark.hold import hold

log = logging.getLogger(__name__)

NOTICE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's changeExpirationMs

Update = Callable[[dict[str, str]], dict[str, str]]  # stored config -> the config to store


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
    update_broker_config(client, entity, lambda _stored: dict(configs))


def update_broker_config(client: KazooClient, entity: str, update: Update) -> dict[str, str]:
    """Change a broker entity's stored settings with `update` (given what ZooKeeper holds) and
    tell every broker; a concurrent change is read again and kept, never overwritten."""
    client.ensure_path(zk_data.CONFIG_BROKERS)
    return _update_with_notice(client, zk_data.broker_config_path(entity), update,
                               zk_data.encode_broker_config_change(entity))


def read_broker_config(client: KazooClient, entity: str) -> dict[str, str]:
    return _read_config(client, zk_data.broker_config_path(entity))


def update_entity_config(client: KazooClient, entity_path: str, update: Update) -> dict[str, str]:
    """Change a client quota entity's config ("users/alice/clients/app" under /config) with
    `update` (given what ZooKeeper holds) and tell every broker; the znode (and its parents)
    created the first time. Returns the config written."""
    path = f"{zk_data.CONFIG}/{entity_path}"
    client.ensure_path(path.rsplit("/", 1)[0])
    return _update_with_notice(client, path, update, zk_data.encode_entity_config_change(entity_path))


def read_entity_config(client: KazooClient, entity_path: str) -> dict[str, str]:
    return _read_config(client, f"{zk_data.CONFIG}/{entity_path}")


def _update_with_notice(client: KazooClient, path: str, update: Update, notice: bytes) -> dict[str, str]:
    """Read an entity's config znode, change it, and write it back with its /config/changes
    notice in one multi that holds only if the znode is still the version read (or still absent):
    two brokers changing different keys of one entity at once both land, the loser of the race
    reading the winner's write and applying its change to it again."""
    while True:
        try:
            data, stat = client.get(path)
            stored, version = zk_data.decode_topic_config(data), stat.version
        except NoNodeError:
            stored, version = {}, None
        configs = update(dict(stored))
        hold("config_write")  # a test can hold a writer here, between its read and its write
        transaction = client.transaction()
        if version is None:
            transaction.create(path, zk_data.encode_topic_config(configs))
        else:
            transaction.set_data(path, zk_data.encode_topic_config(configs), version=version)
        transaction.create(zk_data.config_change_path(), notice, sequence=True)
        failures = [r for r in transaction.commit()
                    if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency))]
        if not failures:
            return configs
        if not isinstance(failures[0], (BadVersionError, NodeExistsError, NoNodeError)):
            raise failures[0]
        log.info("config write raced another at %s; read again", path)


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
