"""FindCoordinator and the classic consumer-group APIs, each run on the group's shard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.acl_operations import GROUP_OPERATIONS, authorized_operations
from tidemark.coordinator.group_views import describe_groups
from tidemark.coordinator.result import Result
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.wire import error_responses

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1

AUTHORIZED_OPERATIONS_FROM = 3  # the first DescribeGroups version with authorized operations


async def handle_find_coordinator(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
    coordinators = []
    for key in keys:
        if key_type == TRANSACTION_KEY_TYPE:
            # No transaction coordinator, so every broker refuses alike: it names itself, and its
            # InitProducerId refuses the transactional id with UNSUPPORTED_VERSION, which clients
            # report as such (librdkafka gives up at this step only on an authorization error,
            # which would send operators looking at ACLs).
            entry = {"key": key, "node_id": ctx.node.id, "host": ctx.node.host, "port": ctx.node.port,
                     "error_code": 0, "error_message": None}
        elif key_type != GROUP_KEY_TYPE:
            entry = error_responses.coordinator(key, ErrorCode.invalid_request, f"unknown key type {key_type}")
        elif not key:
            entry = error_responses.coordinator(key, ErrorCode.invalid_request, "empty group id")
        elif ctx.cluster is not None:
            entry = await _cluster_coordinator(ctx, key)
        else:
            ctx.coordinator.ensure_offsets_topic()
            entry = {"key": key, "node_id": ctx.node.id, "host": ctx.node.host,
                     "port": ctx.node.port, "error_code": 0, "error_message": None}
        coordinators.append(entry)
    if version >= 4:
        return {"throttle_time": 0, "coordinators": coordinators}
    (only,) = coordinators
    return {"throttle_time": 0, **{k: v for k, v in only.items() if k != "key"}}


async def _cluster_coordinator(ctx: RequestContext, key: str) -> dict[str, Any]:
    """In a cluster the group's coordinator is the leader of its offsets partition."""
    assert ctx.cluster is not None
    refusal = await ctx.cluster.ensure_offsets_topic()
    leader = ctx.cluster.leader_of(OFFSETS_TOPIC, ctx.coordinator.partition_for(key)) if refusal is None else None
    address = leader.address(ctx.listener) if leader is not None else None  # on this request's listener
    if leader is None or address is None:
        return error_responses.coordinator(key, ErrorCode.coordinator_not_available,
                                           refusal or "the group's offsets partition has no leader")
    return {"key": key, "node_id": leader.id, "host": address[0], "port": address[1], "error_code": 0,
            "error_message": None}


def _immediate(response: Any, token: int) -> Result:
    return Result().respond(token, response)


async def handle_join(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    client_id, client_host = ctx.client_id or "", ctx.client_host
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.membership.join_group(body, version, token, now, client_id, client_host),
        lambda code: error_responses.join_group(version, code, body.member_id),
    )


async def handle_sync(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    return await ctx.coordinator.call(
        body.group_id, lambda shard, token, now: shard.membership.sync_group(body, version, token, now),
        error_responses.sync_group,
    )


async def handle_heartbeat(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: _immediate(shard.membership.heartbeat(body, version, now), token),
        # Kafka answers a heartbeat to a loading partition blindly with NONE.
        lambda code: error_responses.heartbeat(
            ErrorCode.none if code is ErrorCode.coordinator_load_in_progress else code),
    )


async def handle_leave(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.membership.leave_group(body, version, token, now),
        error_responses.leave_group,
    )


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    groups = []
    for group_id in body.groups:
        def failed(code: ErrorCode, group_id: str = group_id) -> dict[str, Any]:
            return {"groups": [error_responses.described_group(group_id, code)]}

        described = await ctx.coordinator.read(
            group_id, lambda shard, g=group_id: describe_groups(shard.groups, _OneGroup(g), version), failed
        )
        groups.extend(described["groups"])
    if version >= AUTHORIZED_OPERATIONS_FROM and body.include_authorized_operations:
        # As Kafka, only for a group described without error; with no ACLs, every operation.
        operations = authorized_operations(GROUP_OPERATIONS, requested=True)
        groups = [{**g, "authorized_operations": operations} if g["error_code"] == ErrorCode.none else g
                  for g in groups]
    return {"throttle_time": 0, "groups": groups}


class _OneGroup:
    """DescribeGroups asks shard by shard: a request body naming one group."""

    def __init__(self, group_id: str) -> None:
        self.groups = (group_id,)
        self.include_authorized_operations = False


async def handle_list(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    groups, error = ctx.coordinator.list_groups(body, version)
    return {"throttle_time": 0, "error_code": error, "groups": groups}


async def handle_delete_groups(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    results = []
    for group_id in body.groups_names:
        result = await ctx.coordinator.call(
            group_id,
            lambda shard, token, now, g=group_id: shard.delete_group(g, token, now),
            lambda code, g=group_id: error_responses.deleted_group(g, code),
        )
        results.append(result)
    return {"throttle_time": 0, "results": results}
