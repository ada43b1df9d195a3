"""ACLs in ZooKeeper, in ZooKeeper-era Kafka's layout so its tools (kafka-acls.sh with
--authorizer-properties zookeeper.connect=...) read and write the same ACLs:

    /kafka-acl/<ResourceType>/<name>                     literal patterns
    /kafka-acl-extended/prefixed/<ResourceType>/<name>   prefixed patterns
    {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}

Each change writes the resource's znode (conditional on the version read) and a sequential
notice in one multi: /kafka-acl-changes/acl_changes_NNNNNNNNNN holding "<ResourceType>:<name>"
for a literal pattern, /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN holding Kafka's JSON
for a prefixed one. Every broker watches both notice paths and reloads, so an ACL created through
one broker is enforced by all. Notices older than Kafka's 15 minutes are purged.
Resources here are plain dicts {"resourceType", "name", "patternType", "acls"}; what they mean
is the authorizer's business.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
NOTICE_EXPIRATION_MS = 15 * 60 * 1000
LITERAL, PREFIXED = "LITERAL", "PREFIXED"
# How ExtendedAclChangeEvent names the resource type (Java's enum names).
_TYPE_ENUM_NAMES = {"Topic": "TOPIC", "Group": "GROUP", "Cluster": "CLUSTER", "TransactionalId": "TRANSACTIONAL_ID",
                    "DelegationToken": "DELEGATION_TOKEN", "User": "USER"}


def _root(pattern_type: str) -> str:
    return PREFIXED_ROOT if pattern_type == PREFIXED else LITERAL_ROOT


def resource_path(resource_type: str, name: str, pattern_type: str) -> str:
    return f"{_root(pattern_type)}/{resource_type}/{name}"


def _notice(resource_type: str, name: str, pattern_type: str) -> tuple[str, bytes]:
    if pattern_type == PREFIXED:
        event = {"version": 1, "resourceType": _TYPE_ENUM_NAMES.get(resource_type, resource_type.upper()),
                 "name": name, "patternType": PREFIXED}
        return f"{EXTENDED_CHANGES}/{CHANGE_PREFIX}", json.dumps(event).encode()
    return f"{LITERAL_CHANGES}/{CHANGE_PREFIX}", f"{resource_type}:{name}".encode()


def read_all(client: KazooClient) -> list[dict[str, Any]]:
    """Every resource with ACLs, literal and prefixed."""
    resources = []
    for pattern_type in (LITERAL, PREFIXED):
        root = _root(pattern_type)
        try:
            types = client.get_children(root)
        except NoNodeError:
            continue
        for resource_type in types:
            try:
                names = client.get_children(f"{root}/{resource_type}")
            except NoNodeError:
                continue
            for name in names:
                acls, _ = _read(client, resource_path(resource_type, name, pattern_type))
                if acls:
                    resources.append({"resourceType": resource_type, "name": name, "patternType": pattern_type,
                                      "acls": acls})
    return resources


def _read(client: KazooClient, path: str) -> tuple[list[dict[str, Any]], int | None]:
    try:
        data, stat = client.get(path)
    except NoNodeError:
        return [], None
    if not data:
        return [], stat.version
    return list(json.loads(data).get("acls", [])), stat.version


def update(client: KazooClient, resource_type: str, name: str, pattern_type: str,
           change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Apply `change` to one resource's ACLs, conditionally on the version read (retried when
    another writer came first), with its change notice in the same multi; returns the old ACLs."""
    path = resource_path(resource_type, name, pattern_type)
    notice_path, notice = _notice(resource_type, name, pattern_type)
    client.ensure_path(f"{_root(pattern_type)}/{resource_type}")
    client.ensure_path(notice_path.rsplit("/", 1)[0])
    while True:
        old, version = _read(client, path)
        new = change(list(old))
        if new == old:
            return old
        transaction = client.transaction()
        data = json.dumps({"version": 1, "acls": new}).encode()
        if version is None:
            transaction.create(path, data)
        elif new:
            transaction.set_data(path, data, version=version)
        else:
            transaction.delete(path, version=version)
        transaction.create(notice_path, notice, sequence=True)
        failure = next((r for r in transaction.commit() if isinstance(r, Exception)), None)
        if failure is None:
            return old
        if not isinstance(failure, (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError)):
            raise failure


class AclChangeWatcher:
    """Calls `changed()` (in kazoo's thread) after every ACL change notice, and once at start."""

    def __init__(self, client: KazooClient, changed: Callable[[], None]) -> None:
        self.client = client
        self._changed = changed
        self._closed = threading.Event()
        self._watches: list[ChildrenWatch] = []

    def start(self) -> None:
        for path in (LITERAL_CHANGES, EXTENDED_CHANGES):
            self.client.ensure_path(path)
            self._watches.append(ChildrenWatch(self.client, path, self._notices(path)))

    def _notices(self, path: str) -> Callable[[list[str]], bool]:
        def on_children(children: list[str]) -> bool:
            if self._closed.is_set():
                return False
            try:
                self._changed()
                self._purge(path, children)
            except Exception:  # noqa: BLE001 - a failed round is retried at the next notice
                log.exception("acl change handling failed")
            return True
        return on_children

    def _purge(self, path: str, children: list[str]) -> None:
        now_ms = time.time() * 1000
        for child in children:
            try:
                _, stat = self.client.get(f"{path}/{child}")
                if now_ms - stat.ctime > NOTICE_EXPIRATION_MS:
                    self.client.delete(f"{path}/{child}")
            except NoNodeError:
                pass

    def close(self) -> None:
        self._closed.set()
