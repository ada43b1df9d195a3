"""OffsetCommit, OffsetFetch and OffsetDelete: the offset manager's APIs.

OffsetCommit/OffsetFetch go to the offsets topic's coordinator, or to ZooKeeper
(broker.zk_offsets) with offsets.storage=zookeeper and for v0, as Kafka did.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker import zk_offsets
from tidemark.wire import error_responses
from tidemark.wire.build import build
from tidemark.wire.offsets_v0 import RESPONSE_CLASSES

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


def _old_version(ctx: RequestContext, api_key: int, response: dict[str, Any]) -> Any:
    """OffsetCommit v0-1 and OffsetFetch v0 answers are hand-encoded entities, not kio's."""
    cls = RESPONSE_CLASSES.get((api_key, ctx.api_version))
    return response if cls is None else build(cls, response)


async def handle_commit(ctx: RequestContext, request: Request) -> Any:
    body, version = request.body, ctx.api_version
    if zk_offsets.serves(ctx, zk_offsets.OFFSET_COMMIT):
        return _old_version(ctx, 8, await zk_offsets.commit(ctx, body, lambda t: _topic_name(ctx, t)))
    return _old_version(ctx, 8, await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.commit_offsets(body, version, token, now, lambda t: _topic_name(ctx, t)),
        lambda code: error_responses.offset_commit(body, version, code),
    ))


def _wanted(ctx: RequestContext, topics: Any) -> list[tuple[str, list[int]]] | None:
    """The (topic, partitions) an OffsetFetch group asks for; None for all of them."""
    if topics is None:
        return None
    wanted = [(_topic_name(ctx, t), list(getattr(t, "partition_indexes", ()))) for t in topics]
    return [(name, partitions) for name, partitions in wanted if name is not None]


def _fetch_group(ctx: RequestContext, group_id: str, topics: Any, require_stable: bool) -> dict[str, Any]:
    """One group's part of an OffsetFetch response: its topics and its error code."""
    wanted = _wanted(ctx, topics)
    return ctx.coordinator.read(
        group_id,
        lambda shard: {"group_id": group_id, "error_code": 0,
                       "topics": shard.fetch_offsets(group_id, wanted, require_stable)},
        lambda code: error_responses.offset_fetch_group(group_id, code),
    )


async def handle_fetch(ctx: RequestContext, request: Request) -> Any:
    body, version = request.body, ctx.api_version
    require_stable = getattr(body, "require_stable", False)
    if zk_offsets.serves(ctx, zk_offsets.OFFSET_FETCH):
        pairs = [(g.group_id, g.topics) for g in body.groups] if version >= 8 else [(body.group_id, body.topics)]
        groups = list(await asyncio.gather(*(zk_offsets.fetch_group(ctx, g, _wanted(ctx, t)) for g, t in pairs)))
    elif version >= 8:
        groups = [_fetch_group(ctx, g.group_id, g.topics, require_stable) for g in body.groups]
    else:
        groups = [_fetch_group(ctx, body.group_id, body.topics, require_stable)]
    if version >= 8:  # the multi-group form
        return {"throttle_time": 0, "groups": groups}
    group = groups[0]
    if group["error_code"] != ErrorCode.none:
        return _old_version(ctx, 9, error_responses.offset_fetch(body, version, group["error_code"]))
    return _old_version(ctx, 9, {"throttle_time": 0, "topics": group["topics"], "error_code": ErrorCode.none})


async def handle_delete(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    return await ctx.coordinator.call(
        body.group_id, lambda shard, token, now: shard.delete_offsets(body, token, now),
        lambda code: error_responses.offset_delete(body, ctx.api_version, code),
    )
