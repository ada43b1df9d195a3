"""OffsetCommit, OffsetFetch and OffsetDelete: the offset manager's APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.wire import error_responses

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


def _topic_name(ctx: RequestContext, topic: Any) -> str | None:
    """Requests name topics by name, or by id from OffsetCommit v10 / OffsetFetch v10."""
    topic_id = getattr(topic, "topic_id", None)
    if topic_id is not None:
        found = ctx.replicas.topic_by_id(topic_id)
        return found.name if found else None
    return topic.name


async def handle_commit(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.commit_offsets(body, version, token, now, lambda t: _topic_name(ctx, t)),
        lambda code: error_responses.offset_commit(body, version, code),
    )


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool) -> dict[str, Any]:
    """One group's part of an OffsetFetch response: its topics and its error code."""
    wanted = None if topics is None else [
        (_topic_name(ctx, t), list(getattr(t, "partition_indexes", ()))) for t in topics
    ]
    if wanted is not None:
        wanted = [(name, partitions) for name, partitions in wanted if name is not None]
    return ctx.coordinator.read(
        group_id,
        lambda shard: {"group_id": group_id, "error_code": 0,
                       "topics": shard.fetch_offsets(group_id, wanted, require_stable)},
        lambda code: error_responses.offset_fetch_group(group_id, code),
    )


async def handle_fetch(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    require_stable = getattr(body, "require_stable", False)
    if version >= 8:  # the multi-group form
        groups = [_fetch_group(ctx, g.group_id, g.topics, require_stable) for g in body.groups]
        return {"throttle_time": 0, "groups": groups}
    group = _fetch_group(ctx, body.group_id, body.topics, require_stable)
    if group["error_code"] != ErrorCode.none:
        return error_responses.offset_fetch(body, version, group["error_code"])
    return {"throttle_time": 0, "topics": group["topics"], "error_code": ErrorCode.none}


async def handle_delete(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    return await ctx.coordinator.call(
        body.group_id, lambda shard, token, now: shard.delete_offsets(body, token, now),
        lambda code: error_responses.offset_delete(body, ctx.api_version, code),
    )
