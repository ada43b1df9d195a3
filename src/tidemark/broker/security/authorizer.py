"""Kafka's ACL model and AclAuthorizer's decision, pure: no I/O, no broker imports.

An ACL binds a resource pattern (type, name, literal or prefixed) to an entry (principal, host,
operation, allow or deny). A request is allowed when no matching DENY exists and a matching ALLOW
does, where "matching" follows AclAuthorizer: the resource's literal name, the literal wildcard
"*" and every prefixed pattern the name starts with; the principal or "User:*"; the host or "*";
the operation or ALL. Allowing READ, WRITE, DELETE or ALTER implies DESCRIBE, and ALTER_CONFIGS
implies DESCRIBE_CONFIGS (denies imply nothing). super.users are always allowed; a resource
without any ACL is allowed only with allow.everyone.if.no.acl.found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum

from tidemark.broker.acl_operations import AclOperation

AUTHORIZER_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer",
                              "tidemark.AclAuthorizer"})
CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name
WILDCARD = "*"  # a literal resource name matching every name; also the any-host ACL host
WILDCARD_PRINCIPAL = "User:*"
ANONYMOUS = "User:ANONYMOUS"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Kafka's names as ZooKeeper stores them and kafka-acls.sh prints them.
RESOURCE_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                       ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                       ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"}
OPERATION_NAMES = {AclOperation.ALL: "All", AclOperation.READ: "Read", AclOperation.WRITE: "Write",
                   AclOperation.CREATE: "Create", AclOperation.DELETE: "Delete", AclOperation.ALTER: "Alter",
                   AclOperation.DESCRIBE: "Describe", AclOperation.CLUSTER_ACTION: "ClusterAction",
                   AclOperation.DESCRIBE_CONFIGS: "DescribeConfigs", AclOperation.ALTER_CONFIGS: "AlterConfigs",
                   AclOperation.IDEMPOTENT_WRITE: "IdempotentWrite", AclOperation.CREATE_TOKENS: "CreateTokens",
                   AclOperation.DESCRIBE_TOKENS: "DescribeTokens"}
PERMISSION_NAMES = {PermissionType.ALLOW: "Allow", PermissionType.DENY: "Deny"}

_IMPLIED_BY = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: PermissionType


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls match: None names match any; ANY types match any; the MATCH
    pattern type matches every pattern that would apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: PermissionType = PermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        pattern, entry = binding.pattern, binding.entry
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            if self.name is not None and not _pattern_applies(pattern, self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and self.pattern_type != pattern.pattern_type:
                return False
            if self.name is not None and self.name != pattern.name:
                return False
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type is PermissionType.ANY or self.permission_type == entry.permission_type))

    def invalid(self) -> str | None:
        """Why this filter is refused (Kafka's AclBindingFilter.findIndefiniteField for deletes is
        not needed: UNKNOWN values are what it refuses)."""
        if ResourceType.UNKNOWN in (self.resource_type,) or self.pattern_type is PatternType.UNKNOWN \
                or self.operation is AclOperation.UNKNOWN or self.permission_type is PermissionType.UNKNOWN:
            return "the filter has an unknown element"
        return None


def _pattern_applies(pattern: ResourcePattern, name: str) -> bool:
    if pattern.pattern_type is PatternType.LITERAL:
        return pattern.name == name or pattern.name == WILDCARD
    if pattern.pattern_type is PatternType.PREFIXED:
        return name.startswith(pattern.name)
    return False


def binding_invalid(binding: AclBinding) -> str | None:
    """Why CreateAcls refuses this binding (INVALID_REQUEST), as Kafka's validation does."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type not in RESOURCE_TYPE_NAMES:
        return f"invalid resource type {pattern.resource_type}"
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"invalid pattern type {pattern.pattern_type}"
    if entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN) or entry.operation not in OPERATION_NAMES:
        return f"invalid operation {entry.operation}"
    if entry.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"invalid permission type {entry.permission_type}"
    if not pattern.name:
        return "resource name must not be empty"
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME}"
    if pattern.pattern_type is PatternType.PREFIXED and pattern.name == WILDCARD:
        return "a prefixed pattern cannot be the wildcard"
    if ":" not in entry.principal:
        return f"invalid principal {entry.principal!r}: expected TYPE:NAME"
    return None


class Authorizer:
    """AclAuthorizer's decision over a snapshot of the ACLs (replaced whole when they change)."""

    def __init__(self, acls: Mapping[ResourcePattern, frozenset[AccessControlEntry]] | None = None, *,
                 super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False) -> None:
        self.acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        # Indexes: a decision costs a lookup per prefix of the name, not a pass over every ACL.
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self.set_acls(acls or {})
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.store: object | None = None  # the AclStore writing its ACLs (set by the broker)

    def set_acls(self, acls: Mapping[ResourcePattern, frozenset[AccessControlEntry]]) -> None:
        self.acls = {pattern: entries for pattern, entries in acls.items() if entries}
        literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        for pattern, entries in self.acls.items():
            if pattern.pattern_type is PatternType.LITERAL:
                literal[(pattern.resource_type, pattern.name)] = entries
            elif pattern.pattern_type is PatternType.PREFIXED:
                prefixed.setdefault(pattern.resource_type, {})[pattern.name] = entries
        self._literal, self._prefixed = literal, prefixed  # swapped whole: a reader sees one snapshot

    def bindings(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self.acls.items() for e in entries]

    def _matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        found: list[AccessControlEntry] = []
        found.extend(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        prefixes = self._prefixed.get(resource_type)
        if prefixes:
            for end in range(1, len(name) + 1):
                found.extend(prefixes.get(name[:end], ()))
        return found

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        return self._decide(entries, principal, host, operation)

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType (KIP-679): may `principal` perform `operation` on some
        resource of this type? Allowed by any ALLOW ACL not overridden by a DENY of the same or a
        wider pattern."""
        if principal in self.super_users:
            return True
        allowed_ops = _IMPLIED_BY.get(operation, frozenset({operation})) | {AclOperation.ALL}
        denies, allows = [], []
        for pattern, entries in self.acls.items():
            if pattern.resource_type != resource_type:
                continue
            for e in entries:
                if not (_principal_matches(e, principal) and _host_matches(e, host)):
                    continue
                if e.permission_type is PermissionType.DENY and e.operation in (operation, AclOperation.ALL):
                    denies.append(pattern)
                elif e.permission_type is PermissionType.ALLOW and e.operation in allowed_ops:
                    allows.append(pattern)
        if any(p.pattern_type is PatternType.LITERAL and p.name == WILDCARD for p in denies):
            return False
        for allow in allows:
            if not any(_covers(deny, allow) for deny in denies):
                return True
        return self.allow_everyone_if_no_acl_found and not any(
            p.resource_type == resource_type for p in self.acls)

    def _decide(self, entries: list[AccessControlEntry], principal: str, host: str, operation: AclOperation) -> bool:
        for e in entries:
            if e.permission_type is PermissionType.DENY and e.operation in (operation, AclOperation.ALL) \
                    and _principal_matches(e, principal) and _host_matches(e, host):
                return False
        allowed_ops = _IMPLIED_BY.get(operation, frozenset({operation}))
        return any(e.permission_type is PermissionType.ALLOW
                   and (e.operation in allowed_ops or e.operation is AclOperation.ALL)
                   and _principal_matches(e, principal) and _host_matches(e, host) for e in entries)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType, name: str,
                              supported: frozenset[AclOperation]) -> set[AclOperation]:
        """KIP-430: the supported operations this principal is allowed on the resource."""
        return {op for op in supported if self.authorize(principal, host, op, resource_type, name)}


def _principal_matches(entry: AccessControlEntry, principal: str) -> bool:
    return entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL


def _host_matches(entry: AccessControlEntry, host: str) -> bool:
    return entry.host == host or entry.host == WILDCARD


def _covers(deny: ResourcePattern, allow: ResourcePattern) -> bool:
    """Does a DENY on `deny` deny everything `allow` allows?"""
    if deny.pattern_type is PatternType.LITERAL:
        return deny.name == WILDCARD or (allow.pattern_type is PatternType.LITERAL and deny.name == allow.name)
    return allow.name.startswith(deny.name)
