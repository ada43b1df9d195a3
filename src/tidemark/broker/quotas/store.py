"""Where client quotas are kept, and how a change reaches every broker.

In a ZooKeeper cluster as Kafka keeps them: /config/users/<user>/clients/<client-id>,
/config/users/<user>, /config/clients/<client-id> (names URL-encoded as Kafka's Sanitizer does,
"<default>" for a default), each `{"version":1,"config":{...}}`, a change announced by a
/config/changes notice with entity_path "users/alice/clients/app" that every broker follows. A
single broker keeps them in its data directory's metadata file (written durably before a change
is answered or applied).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

import structlog
from kazoo.exceptions import KazooException

from tidemark.broker.quotas.manager import DEFAULT, QUOTA_KEYS, REQUEST, ClientQuotas, Entity
from tidemark.cluster.zk import config_changes

if TYPE_CHECKING:
    from tidemark.broker.cluster import ClusterLink
    from tidemark.cluster.embedded import EmbeddedMetadata

log = structlog.get_logger("tidemark.quotas")

USERS = "users"
CLIENTS = "clients"


def _sanitize(name: str) -> str:
    return name if name == DEFAULT else quote(name, safe="")


def _desanitize(name: str) -> str:
    return name if name == DEFAULT else unquote(name)


def entity_path(entity: Entity) -> str:
    """"users/alice/clients/app", "users/<default>", "clients/app": the entity's config path
    under /config, as in its change notices."""
    user, client_id = entity
    if user is not None and client_id is not None:
        return f"{USERS}/{_sanitize(user)}/{CLIENTS}/{_sanitize(client_id)}"
    if user is not None:
        return f"{USERS}/{_sanitize(user)}"
    if client_id is not None:
        return f"{CLIENTS}/{_sanitize(client_id)}"
    raise ValueError("a quota entity names a user, a client id or both")


def parse_entity_path(path: str) -> Entity | None:
    """The entity an entity path names; None for one that names no quota entity."""
    parts = path.split("/")
    if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS:
        return _desanitize(parts[1]), _desanitize(parts[3])
    if len(parts) == 2 and parts[0] == USERS:
        return _desanitize(parts[1]), None
    if len(parts) == 2 and parts[0] == CLIENTS:
        return None, _desanitize(parts[1])
    return None


def to_text(values: Mapping[str, float]) -> dict[str, str]:
    """As Kafka stores them: byte rates as whole numbers, request_percentage as a double."""
    return {k: (repr(float(v)) if k == REQUEST else str(int(v))) for k, v in values.items()}


def from_text(configs: Mapping[str, str], where: str) -> dict[str, float]:
    """The quotas a stored entity holds that tidemark meters; others are logged and left out."""
    values = {}
    for key, raw in configs.items():
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if key not in QUOTA_KEYS or not value > 0:
            log.warning("client_quota_ignored", entity=where, key=key, value=raw)
            continue
        values[key] = value
    return values


class QuotaStore:
    """The broker's ClientQuotas, loaded from where they are kept and kept current."""

    def __init__(self, quotas: ClientQuotas, cluster: ClusterLink | None) -> None:
        self.quotas = quotas
        self.cluster = cluster
        self._lock = asyncio.Lock()  # reads applied in the order the notices came

    def load_embedded(self, metadata: EmbeddedMetadata) -> None:
        for path, configs in metadata.client_quotas.items():
            entity = parse_entity_path(path)
            if entity is not None:
                self.quotas.set(entity, from_text(configs, path))

    async def load_cluster(self, timeout_s: float) -> None:
        """At start: every quota entity ZooKeeper holds."""
        assert self.cluster is not None
        stored = await self.cluster.session.call(config_changes.read_client_quotas, self.cluster.client,
                                                 timeout_s=timeout_s)
        for path, configs in stored.items():
            entity = parse_entity_path(path)
            if entity is not None:
                self.quotas.set(entity, from_text(configs, path))

    async def reload(self, path: str) -> None:
        """A change notice named this entity: read it again and apply it."""
        entity = parse_entity_path(path)
        if entity is None or self.cluster is None:
            return
        async with self._lock:
            try:
                configs = await self.cluster.session.call(config_changes.read_entity_config,
                                                          self.cluster.client, path)
            except KazooException as exc:
                log.warning("client_quotas_not_reloaded", entity=path, error=repr(exc))
                return
            self.quotas.set(entity, from_text(configs, path))
            log.info("client_quotas_reloaded", entity=path, configs=configs)

    async def alter(self, metadata: EmbeddedMetadata | None, entity: Entity,
                    change: Callable[[dict[str, float]], dict[str, float]]) -> dict[str, float]:
        """Make `change(quotas it has)` the whole of an entity's quotas: stored, then applied here
        (the other brokers apply them at the change notice). In ZooKeeper the change is applied to
        what the znode holds, with a versioned write: another broker's concurrent change to the
        same entity is kept, not overwritten; a user's other keys (its SCRAM credentials) too."""
        path = entity_path(entity)
        if self.cluster is not None:
            def update(stored: dict[str, str]) -> dict[str, str]:
                kept = {k: v for k, v in stored.items() if k not in QUOTA_KEYS}
                quotas = from_text({k: v for k, v in stored.items() if k in QUOTA_KEYS}, path)
                return {**kept, **to_text(change(quotas))}

            written = await self.cluster.session.call(config_changes.update_entity_config, self.cluster.client,
                                                      path, update)
            await self.reload(path)  # in turn with the notices, so an older read never lands after
            values = from_text({k: v for k, v in written.items() if k in QUOTA_KEYS}, path)
        else:
            assert metadata is not None
            values = change(self.current(entity))
            metadata.set_client_quotas(path, to_text(values))
            self.quotas.set(entity, dict(values))
        log.info("client_quotas_altered", entity=path, configs=to_text(values))
        return values

    def current(self, entity: Entity) -> dict[str, float]:
        return dict(self.quotas.configs.get(entity, {}))
