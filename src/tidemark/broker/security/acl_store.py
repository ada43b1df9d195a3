"""Where ACLs live, behind one interface: ZooKeeper in Kafka's layout when the broker is
clustered (cluster/zk/acls.py: every broker reloads at each change notice), else the embedded
metadata file in the data directory (replaced atomically, fsynced). A store writes durably first
and only then hands the authorizer its new ACLs; so a CreateAcls answered is enforced, and
survives a restart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import structlog

from tidemark.broker.acl_operations import AclOperation
from tidemark.broker.security.authorizer import (OPERATION_NAMES, PERMISSION_NAMES, RESOURCE_TYPE_NAMES,
                                                 AccessControlEntry, AclBinding, AclBindingFilter, Authorizer,
                                                 PatternType, PermissionType, ResourcePattern, ResourceType)
from tidemark.cluster.zk import acls as zk_acls

if TYPE_CHECKING:
    from tidemark.cluster.embedded import EmbeddedMetadata
    from tidemark.cluster.zk.session import ZkSession

log = structlog.get_logger("tidemark.security")

Acls = dict[ResourcePattern, frozenset[AccessControlEntry]]
_TYPES_BY_NAME = {name: rtype for rtype, name in RESOURCE_TYPE_NAMES.items()}
_OPERATIONS_BY_NAME = {name: op for op, name in OPERATION_NAMES.items()}
_PERMISSIONS_BY_NAME = {name: p for p, name in PERMISSION_NAMES.items()}


# -- Kafka's JSON -------------------------------------------------------------------------------

def encode_entry(entry: AccessControlEntry) -> dict[str, str]:
    return {"principal": entry.principal, "permissionType": PERMISSION_NAMES[entry.permission_type],
            "operation": OPERATION_NAMES[entry.operation], "host": entry.host}


def decode_entry(data: dict[str, Any]) -> AccessControlEntry:
    return AccessControlEntry(data["principal"], data["host"], _OPERATIONS_BY_NAME[data["operation"]],
                              _PERMISSIONS_BY_NAME[data["permissionType"]])


def decode_resources(resources: Iterable[dict[str, Any]]) -> Acls:
    acls: Acls = {}
    for resource in resources:
        try:
            pattern = ResourcePattern(_TYPES_BY_NAME[resource["resourceType"]], resource["name"],
                                      PatternType[resource.get("patternType", "LITERAL").upper()])
            entries = frozenset(decode_entry(e) for e in resource["acls"])
        except (KeyError, TypeError) as exc:  # written by a newer tool: skipped, as Kafka logs and skips
            log.warning("acl_resource_unreadable", resource=str(resource)[:200], error=repr(exc))
            continue
        if entries:
            acls[pattern] = acls.get(pattern, frozenset()) | entries
    return acls


def encode_resources(acls: Acls) -> list[dict[str, Any]]:
    return [{"resourceType": RESOURCE_TYPE_NAMES[p.resource_type], "name": p.name, "patternType": p.pattern_type.name,
             "acls": sorted((encode_entry(e) for e in entries), key=lambda d: sorted(d.items()))}
            for p, entries in sorted(acls.items(), key=lambda kv: (kv[0].resource_type, kv[0].pattern_type, kv[0].name))
            if entries]


# -- the stores ---------------------------------------------------------------------------------

class AclStore:
    """Loads the ACLs into the authorizer at start; creates and deletes durably."""

    def __init__(self, authorizer: Authorizer) -> None:
        self.authorizer = authorizer

    async def start(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass

    async def create(self, bindings: list[AclBinding]) -> None:
        raise NotImplementedError

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; the bindings each one deleted."""
        raise NotImplementedError


class EmbeddedAclStore(AclStore):
    def __init__(self, authorizer: Authorizer, metadata: EmbeddedMetadata) -> None:
        super().__init__(authorizer)
        self.metadata = metadata

    async def start(self) -> None:
        self.authorizer.set_acls(decode_resources(self.metadata.acls))

    def _save(self, acls: Acls) -> None:
        self.metadata.set_acls(encode_resources(acls))  # fsynced before the authorizer sees it
        self.authorizer.set_acls(acls)

    async def create(self, bindings: list[AclBinding]) -> None:
        acls = dict(self.authorizer.acls)
        for b in bindings:
            acls[b.pattern] = acls.get(b.pattern, frozenset()) | {b.entry}
        self._save(acls)

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        current = self.authorizer.bindings()
        deleted = [[b for b in current if f.matches(b)] for f in filters]
        gone = {b for found in deleted for b in found}
        if gone:
            acls: Acls = {}
            for b in current:
                if b not in gone:
                    acls[b.pattern] = acls.get(b.pattern, frozenset()) | {b.entry}
            self._save(acls)
        return deleted


class ZkAclStore(AclStore):
    def __init__(self, authorizer: Authorizer, session: ZkSession) -> None:
        super().__init__(authorizer)
        self.session = session
        self._watcher: zk_acls.AclChangeWatcher | None = None

    async def start(self) -> None:
        self.authorizer.set_acls(decode_resources(await self.session.call(zk_acls.read_all, self.session.client)))
        loop = asyncio.get_running_loop()

        def changed() -> None:  # kazoo's thread: read there, apply on the event loop
            acls = decode_resources(zk_acls.read_all(self.session.client))
            if not loop.is_closed():
                loop.call_soon_threadsafe(self.authorizer.set_acls, acls)

        self._watcher = zk_acls.AclChangeWatcher(self.session.client, changed)
        await self.session.call(self._watcher.start)

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.close()

    async def _update(self, pattern: ResourcePattern,
                      change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        return await self.session.call(zk_acls.update, self.session.client, RESOURCE_TYPE_NAMES[pattern.resource_type],
                                       pattern.name, pattern.pattern_type.name, change)

    async def _reload(self) -> None:
        # This broker enforces its own change at once, before answering (others at the notice).
        self.authorizer.set_acls(decode_resources(await self.session.call(zk_acls.read_all, self.session.client)))

    async def create(self, bindings: list[AclBinding]) -> None:
        by_pattern: dict[ResourcePattern, list[dict[str, str]]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, []).append(encode_entry(b.entry))
        for pattern, added in by_pattern.items():
            await self._update(pattern, lambda old, added=added: old + [e for e in added if e not in old])
        await self._reload()

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[AclBinding]]:
        await self._reload()
        current = self.authorizer.bindings()
        deleted = [[b for b in current if f.matches(b)] for f in filters]
        by_pattern: dict[ResourcePattern, list[dict[str, str]]] = {}
        for b in {b for found in deleted for b in found}:
            by_pattern.setdefault(b.pattern, []).append(encode_entry(b.entry))
        for pattern, removed in by_pattern.items():
            await self._update(pattern, lambda old, removed=removed: [e for e in old if e not in removed])
        if by_pattern:
            await self._reload()
        return deleted


def filter_from(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
                operation: int, permission_type: int) -> AclBindingFilter:
    """A filter from a request's fields (raises ValueError on codes Kafka does not know)."""
    return AclBindingFilter(ResourceType(resource_type), name, PatternType(pattern_type), principal, host,
                            AclOperation(operation), PermissionType(permission_type))
