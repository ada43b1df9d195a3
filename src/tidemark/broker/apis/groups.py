"""FindCoordinator and the classic consumer-group APIs, each run on the group's shard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.acl_operations import GROUP_OPERATIONS
from tidemark.broker.security import access
from tidemark.coordinator.consumer_group import views as consumer_group_views
from tidemark.coordinator.group_views import describe_groups
from tidemark.coordinator.result import Result
from tidemark.records.consumer_group_schema import TopicMetadata as ConsumerGroupTopic
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.records.transaction_log_schema import TRANSACTION_STATE_TOPIC
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
        if key_type in (GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE) and not access.allowed(
                ctx, access.DESCRIBE, access.GROUP if key_type == GROUP_KEY_TYPE else access.TRANSACTIONAL_ID, key):
            entry = error_responses.coordinator(key, ErrorCode.group_authorization_failed if key_type == GROUP_KEY_TYPE
                                                else ErrorCode.transactional_id_authorization_failed)
        elif key_type == TRANSACTION_KEY_TYPE:
            entry = await _transaction_coordinator(ctx, key)
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


async def _transaction_coordinator(ctx: RequestContext, key: str) -> dict[str, Any]:
    """A transactional id's coordinator: the leader of its __transaction_state partition (the
    topic created on first use, as Kafka does)."""
    if not key:
        return error_responses.coordinator(key, ErrorCode.invalid_request, "empty transactional id")
    if ctx.cluster is None:
        ctx.transactions.ensure_topic()
        return {"key": key, "node_id": ctx.node.id, "host": ctx.node.host, "port": ctx.node.port, "error_code": 0,
                "error_message": None}
    code = await ctx.cluster.ensure_transaction_state_topic()
    leader = ctx.cluster.leader_of(TRANSACTION_STATE_TOPIC, ctx.transactions.partition_for(key)) \
        if code is None else None
    if leader is None:
        return error_responses.coordinator(key, ErrorCode.coordinator_not_available,
                                           "the transactional id's partition has no leader")
    return {"key": key, "node_id": leader.id, "host": leader.host, "port": leader.port, "error_code": 0,
            "error_message": None}


def _immediate(response: Any, token: int) -> Result:
    return Result().respond(token, response)


async def handle_join(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.join_group(version, ErrorCode.group_authorization_failed, body.member_id)
    client_id, client_host = ctx.client_id or "", ctx.client_host

    def join(shard: Any, token: int, now: int) -> Result:
        if body.group_id in shard.consumer_groups:
            # A classic member cannot join a KIP-848 consumer group here (no online downgrade).
            return _immediate(error_responses.join_group(version, ErrorCode.inconsistent_group_protocol,
                                                         body.member_id), token)
        return shard.membership.join_group(body, version, token, now, client_id, client_host)

    return await ctx.coordinator.call(body.group_id, join,
                                      lambda code: error_responses.join_group(version, code, body.member_id))


def _topics_image(ctx: RequestContext) -> dict[str, Any]:
    """Every topic a consumer may subscribe to, as the consumer group records describe it."""
    return {t.name: ConsumerGroupTopic(t.topic_id, t.name, t.partitions)
            for t in ctx.partitions.metadata.topics.values() if not t.internal}


async def handle_consumer_group_heartbeat(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    # As Kafka: READ on the group, DESCRIBE on every topic subscribed to by name.
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.consumer_group_heartbeat(ErrorCode.group_authorization_failed)
    if access.refused(ctx, access.DESCRIBE, access.TOPIC, body.subscribed_topic_names or ()):
        return error_responses.consumer_group_heartbeat(ErrorCode.topic_authorization_failed)
    client_id, client_host = ctx.client_id or "", ctx.client_host
    topics = _topics_image(ctx)
    # As Kafka's regex resolution: a regex's matches are only the topics this principal may DESCRIBE.
    describable = None if ctx.authorizer is None else \
        (lambda name: access.allowed(ctx, access.DESCRIBE, access.TOPIC, name))
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.consumer.heartbeat(body, version, token, now, topics, client_id, client_host,
                                                           describable),
        error_responses.consumer_group_heartbeat,
    )


async def handle_consumer_group_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    topics = _topics_image(ctx)
    described = []
    for group_id in body.group_ids:
        if not access.allowed(ctx, access.DESCRIBE, access.GROUP, group_id):
            described.append(error_responses.consumer_group_described(group_id, ErrorCode.group_authorization_failed))
            continue

        def failed(code: ErrorCode, group_id: str = group_id) -> dict[str, Any]:
            return error_responses.consumer_group_described(group_id, code)

        described.append(await ctx.coordinator.read(
            group_id, lambda shard, g=group_id: consumer_group_views.describe(shard, g, topics), failed))
    if body.include_authorized_operations:
        described = [{**g, "authorized_operations": access.operations_field(ctx, GROUP_OPERATIONS, True, access.GROUP,
                                                                            g["group_id"])}
                     if g["error_code"] == ErrorCode.none else g for g in described]
    return {"throttle_time": 0, "groups": described}


async def handle_sync(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.sync_group(ErrorCode.group_authorization_failed)
    return await ctx.coordinator.call(
        body.group_id, lambda shard, token, now: shard.membership.sync_group(body, version, token, now),
        error_responses.sync_group,
    )


async def handle_heartbeat(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.heartbeat(ErrorCode.group_authorization_failed)
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: _immediate(shard.membership.heartbeat(body, version, now), token),
        # Kafka answers a heartbeat to a loading partition blindly with NONE.
        lambda code: error_responses.heartbeat(
            ErrorCode.none if code is ErrorCode.coordinator_load_in_progress else code),
    )


async def handle_leave(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.leave_group(ErrorCode.group_authorization_failed)
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.membership.leave_group(body, version, token, now),
        error_responses.leave_group,
    )


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    groups = []
    for group_id in body.groups:
        if not access.allowed(ctx, access.DESCRIBE, access.GROUP, group_id):
            groups.append(error_responses.described_group(group_id, ErrorCode.group_authorization_failed))
            continue

        def failed(code: ErrorCode, group_id: str = group_id) -> dict[str, Any]:
            return {"groups": [error_responses.described_group(group_id, code)]}

        described = await ctx.coordinator.read(
            group_id, lambda shard, g=group_id: _describe_one(shard, g, version), failed
        )
        groups.extend(described["groups"])
    if version >= AUTHORIZED_OPERATIONS_FROM and body.include_authorized_operations:
        # As Kafka, only for a group described without error; without an authorizer, every operation.
        groups = [{**g, "authorized_operations": access.operations_field(ctx, GROUP_OPERATIONS, True, access.GROUP,
                                                                         g["group_id"])}
                  if g["error_code"] == ErrorCode.none else g for g in groups]
    return {"throttle_time": 0, "groups": groups}


def _describe_one(shard: Any, group_id: str, version: int) -> dict[str, Any]:
    """A classic group as DescribeGroups describes it; a consumer group (KIP-848) as Kafka 4.x
    answers it: v6+ GROUP_ID_NOT_FOUND "Group ... is not a classic group.", older versions Dead."""
    if group_id in shard.consumer_groups.committed:
        return {"groups": [{
            "error_code": ErrorCode.group_id_not_found if version >= 6 else ErrorCode.none,
            "error_message": f"Group {group_id} is not a classic group." if version >= 6 else None,
            "group_id": group_id, "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": consumer_group_views.AUTHORIZED_OPERATIONS_OMITTED}]}
    return describe_groups(shard.groups, _OneGroup(group_id), version)


class _OneGroup:
    """DescribeGroups asks shard by shard: a request body naming one group."""

    def __init__(self, group_id: str) -> None:
        self.groups = (group_id,)
        self.include_authorized_operations = False


async def handle_list(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    groups, error = ctx.coordinator.list_groups(body, version)
    if not access.allowed(ctx, access.DESCRIBE, access.CLUSTER):  # else only the groups it may describe
        groups = [g for g in groups if access.allowed(ctx, access.DESCRIBE, access.GROUP, g["group_id"])]
    return {"throttle_time": 0, "error_code": error, "groups": groups}


async def handle_delete_groups(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    results = []
    for group_id in body.groups_names:
        if not access.allowed(ctx, access.DELETE, access.GROUP, group_id):
            results.append(error_responses.deleted_group(group_id, ErrorCode.group_authorization_failed))
            continue
        result = await ctx.coordinator.call(
            group_id,
            lambda shard, token, now, g=group_id: shard.delete_group(g, token, now),
            lambda code, g=group_id: error_responses.deleted_group(g, code),
        )
        results.append(result)
    return {"throttle_time": 0, "results": results}
