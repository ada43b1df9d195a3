"""`tidemark acls add|remove|list`: ACLs of any Kafka cluster, after kafka-acls.sh, over the wire
(CreateAcls, DescribeAcls, DeleteAcls through confluent-kafka's AdminClient).

    tidemark acls add --bootstrap-server HOST:PORT --allow-principal User:alice --operation Read --topic orders
    tidemark acls remove --bootstrap-server HOST:PORT --allow-principal User:alice --topic orders
    tidemark acls list --bootstrap-server HOST:PORT [--topic T | --group G | --cluster | ...] [--principal P]
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from tidemark.client.reach import unreachable

CLUSTER_NAME = "kafka-cluster"
_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
             "any": ResourcePatternType.ANY, "match": ResourcePatternType.MATCH}


_O = AclOperation
# What each resource type supports (Kafka's AclEntry.supportedOperations, which kafka-acls.sh checks).
_SUPPORTED = {
    ResourceType.TOPIC: {_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER, _O.DESCRIBE_CONFIGS,
                         _O.ALTER_CONFIGS},
    ResourceType.GROUP: {_O.READ, _O.DESCRIBE, _O.DELETE},
    ResourceType.BROKER: {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE,
                          _O.ALTER, _O.DESCRIBE},
    ResourceType.TRANSACTIONAL_ID: {_O.DESCRIBE, _O.WRITE},
}


class AclsError(click.ClickException):
    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def _resources(topics: Sequence[str], groups: Sequence[str], cluster: bool,
               transactional_ids: Sequence[str]) -> list[tuple[ResourceType, str]]:
    return ([(ResourceType.TOPIC, t) for t in topics] + [(ResourceType.GROUP, g) for g in groups]
            + ([(ResourceType.BROKER, CLUSTER_NAME)] if cluster else [])
            + [(ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids])


def _operations(names: Sequence[str]) -> list[AclOperation]:
    ops = []
    for name in names or ("All",):
        op = _OPERATIONS.get(name.replace("_", "").replace("-", "").lower())
        if op is None:
            raise AclsError(f"Error: unknown operation {name!r} (one of: {', '.join(sorted(_OPERATIONS))})")
        ops.append(op)
    return ops


def _principals(values: Sequence[str], option: str) -> list[str]:
    for principal in values:
        if ":" not in principal:
            raise AclsError(f"Error: {option} {principal!r} is not TYPE:NAME (e.g. User:alice)")
    return list(values)


def _describe_pattern(restype: ResourceType, name: str, pattern: ResourcePatternType) -> str:
    kind = "CLUSTER" if restype == ResourceType.BROKER else restype.name
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern.name})"


def _describe_entry(binding: AclBinding) -> str:
    return (f"(principal={binding.principal}, host={binding.host}, operation={binding.operation.name}, "
            f"permissionType={binding.permission_type.name})")


class _Admin:
    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap, self.timeout_s = bootstrap, timeout_s
        why = unreachable(bootstrap, timeout_s)
        if why is not None:
            raise AclsError(f"Error: cannot reach bootstrap server {bootstrap}: {why}")
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout_s * 1000)})

    def wait(self, future: Any, what: str) -> Any:
        try:
            return future.result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            error = exc.args[0]
            raise AclsError(f"Error: {what} failed against {self.bootstrap}: {error.name()}: {error.str()}") from exc
        except FutureTimeout as exc:
            raise AclsError(f"Error: {what} timed out after {self.timeout_s:g}s against {self.bootstrap}") from exc

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return self.wait(self.admin.describe_acls(acl_filter, request_timeout=self.timeout_s), "listing ACLs")


def _print_listing(bindings: list[AclBinding]) -> None:
    by_resource: dict[tuple, list[AclBinding]] = {}
    for b in bindings:
        by_resource.setdefault((b.restype, b.name, b.resource_pattern_type), []).append(b)
    for (restype, name, pattern), found in sorted(by_resource.items(), key=lambda kv: (kv[0][0].value, kv[0][1])):
        click.echo(f"Current ACLs for resource `{_describe_pattern(restype, name, pattern)}`: ")
        for b in sorted(found, key=_describe_entry):
            click.echo(f" \t{_describe_entry(b)} ")
        click.echo("")


def _common(function: Any) -> Any:
    options = [
        click.option("--bootstrap-server", "bootstrap", required=True, help="HOST:PORT[,HOST:PORT...]"),
        click.option("--topic", "topics", multiple=True, help="a topic (repeatable)"),
        click.option("--group", "groups", multiple=True, help="a consumer group (repeatable)"),
        click.option("--cluster", is_flag=True, help="the cluster resource"),
        click.option("--transactional-id", "transactional_ids", multiple=True, help="a transactional id"),
        click.option("--timeout", "timeout_ms", default=30000, show_default=True, type=click.IntRange(1),
                     help="bound on every wait, in ms"),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _entries_options(function: Any) -> Any:
    options = [
        click.option("--allow-principal", "allow_principals", multiple=True, help="TYPE:NAME allowed"),
        click.option("--deny-principal", "deny_principals", multiple=True, help="TYPE:NAME denied"),
        click.option("--allow-host", "allow_hosts", multiple=True, help="host of allow ACLs (default *)"),
        click.option("--deny-host", "deny_hosts", multiple=True, help="host of deny ACLs (default *)"),
        click.option("--operation", "operations", multiple=True, help="Read, Write, Create, Delete, Alter, "
                     "Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All (default All)"),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _bindings(resources: list[tuple[ResourceType, str]], pattern: ResourcePatternType, allow_principals: Sequence[str],
              deny_principals: Sequence[str], allow_hosts: Sequence[str], deny_hosts: Sequence[str],
              operations: Sequence[str]) -> list[AclBinding]:
    ops = _operations(operations)
    bindings = []
    for restype, name in resources:
        unsupported = [op.name for op in ops if op != AclOperation.ALL and op not in _SUPPORTED[restype]]
        if unsupported:
            kind = "Cluster" if restype == ResourceType.BROKER else restype.name
            raise AclsError(f"Error: {kind} does not support operation(s) {', '.join(unsupported)}")
        for permission, principals, hosts in (
                (AclPermissionType.ALLOW, _principals(allow_principals, "--allow-principal"), allow_hosts or ("*",)),
                (AclPermissionType.DENY, _principals(deny_principals, "--deny-principal"), deny_hosts or ("*",))):
            for principal in principals:
                for host in hosts:
                    for op in ops:
                        bindings.append(AclBinding(restype, name, pattern, principal, host, op, permission))
    return bindings


@click.group()
def acls() -> None:
    """Add, remove and list ACLs of a Kafka cluster (as kafka-acls.sh)."""


@acls.command()
@_common
@_entries_options
@click.option("--resource-pattern-type", "pattern", default="literal", show_default=True,
              type=click.Choice(["literal", "prefixed"], case_sensitive=False))
def add(bootstrap: str, topics: Sequence[str], groups: Sequence[str], cluster: bool,
        transactional_ids: Sequence[str], timeout_ms: int, allow_principals: Sequence[str],
        deny_principals: Sequence[str], allow_hosts: Sequence[str], deny_hosts: Sequence[str],
        operations: Sequence[str], pattern: str) -> None:
    """Add ACLs: each principal x host x operation on each resource."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise AclsError("Error: name a resource: --topic, --group, --cluster or --transactional-id")
    if not allow_principals and not deny_principals:
        raise AclsError("Error: name a principal: --allow-principal or --deny-principal")
    bindings = _bindings(resources, _PATTERNS[pattern.lower()], allow_principals, deny_principals, allow_hosts,
                         deny_hosts, operations)
    admin = _Admin(bootstrap, timeout_ms / 1000)
    for restype, name in resources:
        click.echo(f"Adding ACLs for resource `{_describe_pattern(restype, name, _PATTERNS[pattern.lower()])}`: ")
        for b in bindings:
            if (b.restype, b.name) == (restype, name):
                click.echo(f" \t{_describe_entry(b)} ")
        click.echo("")
    futures = admin.admin.create_acls(bindings, request_timeout=admin.timeout_s)
    for binding, future in futures.items():
        admin.wait(future, f"adding {_describe_entry(binding)}")
    _print_listing([b for restype, name in resources for b in admin.describe(
        AclBindingFilter(restype, name, _PATTERNS[pattern.lower()], None, None, AclOperation.ANY,
                         AclPermissionType.ANY))])


@acls.command()
@_common
@_entries_options
@click.option("--resource-pattern-type", "pattern", default="literal", show_default=True,
              type=click.Choice(list(_PATTERNS), case_sensitive=False))
@click.option("--force", is_flag=True, help="accepted for kafka-acls.sh's scripts (no prompt is asked)")
def remove(bootstrap: str, topics: Sequence[str], groups: Sequence[str], cluster: bool,
           transactional_ids: Sequence[str], timeout_ms: int, allow_principals: Sequence[str],
           deny_principals: Sequence[str], allow_hosts: Sequence[str], deny_hosts: Sequence[str],
           operations: Sequence[str], pattern: str, force: bool) -> None:
    """Remove the ACLs named, or every ACL of the resources when no principal is named."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    if not resources:
        raise AclsError("Error: name a resource: --topic, --group, --cluster or --transactional-id")
    pattern_type = _PATTERNS[pattern.lower()]
    if allow_principals or deny_principals:
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                    b.permission_type)
                   for b in _bindings(resources, pattern_type, allow_principals, deny_principals, allow_hosts,
                                      deny_hosts, operations)]
    else:
        filters = [AclBindingFilter(restype, name, pattern_type, None, None, AclOperation.ANY, AclPermissionType.ANY)
                   for restype, name in resources]
    admin = _Admin(bootstrap, timeout_ms / 1000)
    futures = admin.admin.delete_acls(filters, request_timeout=admin.timeout_s)
    removed = [b for acl_filter, future in futures.items() for b in admin.wait(future, "removing ACLs")]
    for b in removed:
        click.echo(f"Removed {_describe_entry(b)} from "
                   f"`{_describe_pattern(b.restype, b.name, b.resource_pattern_type)}`")
    if not removed:
        click.echo("No ACLs matched.")


@acls.command(name="list")
@_common
@click.option("--resource-pattern-type", "pattern", default="any", show_default=True,
              type=click.Choice(list(_PATTERNS), case_sensitive=False))
@click.option("--principal", "principals", multiple=True, help="only this principal's ACLs (repeatable)")
def list_(bootstrap: str, topics: Sequence[str], groups: Sequence[str], cluster: bool,
          transactional_ids: Sequence[str], timeout_ms: int, pattern: str, principals: Sequence[str]) -> None:
    """List ACLs: of the resources named, or all."""
    resources = _resources(topics, groups, cluster, transactional_ids)
    pattern_type = _PATTERNS[pattern.lower()]
    filters = [AclBindingFilter(restype, name, pattern_type, principal, None, AclOperation.ANY, AclPermissionType.ANY)
               for restype, name in (resources or [(ResourceType.ANY, None)])
               for principal in (_principals(principals, "--principal") or [None])]
    admin = _Admin(bootstrap, timeout_ms / 1000)
    found: dict[tuple, AclBinding] = {}
    for acl_filter in filters:
        for b in admin.describe(acl_filter):
            found[(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                   b.permission_type)] = b
    _print_listing(list(found.values()))
