"""Authorized operations (KIP-430): the operations a client may perform on a resource, as the
32-bit field Metadata, DescribeCluster and DescribeGroups answer when asked.

Without an authorizer Kafka grants every operation a resource type supports, so that is what
tidemark answers; an authorizer, once there is one, narrows the set. Codes are Kafka's
AclOperation codes; bit `code` of the field is set for each operation granted.
"""

from __future__ import annotations

from enum import IntEnum


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


# What each resource type supports (Kafka's AclEntry.supportedOperations).
TOPIC_OPERATIONS = frozenset({
    AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
    AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
GROUP_OPERATIONS = frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE})
CLUSTER_OPERATIONS = frozenset({
    AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE})

OMITTED = -(2 ** 31)
"""The field's value when the request did not ask for authorized operations (Integer.MIN_VALUE)."""


def to_bit_field(operations: frozenset[AclOperation] | set[AclOperation]) -> int:
    return sum(1 << operation for operation in operations)


def authorized_operations(supported: frozenset[AclOperation], requested: bool) -> int:
    """The field for a resource whose type supports `supported`: every one of them (no
    authorizer), or OMITTED when the request did not ask."""
    return to_bit_field(supported) if requested else OMITTED
