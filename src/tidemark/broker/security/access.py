"""What handlers ask: may this request's principal, from its host, do `operation` on a resource?
Always yes without an authorizer (authorizer.class.name empty, as in Kafka)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tidemark.broker.acl_operations import OMITTED, AclOperation, to_bit_field
from tidemark.broker.security.authorizer import CLUSTER_NAME, ResourceType

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext

TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                                                AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE)
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE)


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
            name: str = CLUSTER_NAME) -> bool:
    authorizer = ctx.authorizer
    return authorizer is None or authorizer.authorize(ctx.principal, ctx.client_host, operation, resource_type, name)


def allowed_any(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Allowed on some resource of the type (Kafka's authorizeByResourceType)."""
    authorizer = ctx.authorizer
    return authorizer is None or authorizer.authorize_any(ctx.principal, ctx.client_host, operation, resource_type)


def operations_field(ctx: RequestContext, supported: frozenset[AclOperation], requested: bool,
                     resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
    """KIP-430's authorized operations: every supported one without an authorizer, else those
    the authorizer allows; OMITTED when not asked."""
    if not requested:
        return OMITTED
    authorizer = ctx.authorizer
    if authorizer is None:
        return to_bit_field(supported)
    return to_bit_field(authorizer.authorized_operations(ctx.principal, ctx.client_host, resource_type, name,
                                                         supported))


def refused(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType, names: Iterable[str | None]) -> set[str]:
    """The names (None skipped: not resolved, answered otherwise) the principal may not `operation`."""
    if ctx.authorizer is None:
        return set()
    return {n for n in set(names) if n is not None and not allowed(ctx, operation, resource_type, n)}


def topics_refused_partitions(topic_entries: list[dict[str, Any]], refused_names: set[str], code: int,
                              drop: bool = False) -> list[dict[str, Any]]:
    """Answer entries ({"name", "partitions": [...]}) with the refused topics' partitions carrying
    `code` and no data (OffsetFetch's layout), or left out when `drop` (an all-topics ask)."""
    answered = []
    for entry in topic_entries:
        if entry.get("name") not in refused_names:
            answered.append(entry)
        elif not drop:
            answered.append({**entry, "partitions": [
                {**p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": code}
                for p in entry["partitions"]]})
    return answered
