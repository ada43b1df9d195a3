"""OffsetCommit, OffsetFetch and OffsetDelete: the offset manager's APIs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from tidemark.broker.server import Broker
    from tidemark.wire.codec import Request


def _topic_name(broker: Broker, topic: Any) -> str | None:
    """Requests name topics by name, or by id from OffsetCommit v10 / OffsetFetch v10."""
    topic_id = getattr(topic, "topic_id", None)
    if topic_id is not None:
        found = broker.replicas.topic_by_id(topic_id)
        return found.name if found else None
    return topic.name


async def handle_commit(broker: Broker, request: Request) -> dict[str, Any]:
    body, version = request.body, request.api_version

    def everywhere(code: ErrorCode) -> dict[str, Any]:
        return {"throttle_time": 0, "topics": [
            {"name": getattr(t, "name", None), "topic_id": getattr(t, "topic_id", None),
             "partitions": [{"partition_index": p.partition_index, "error_code": code} for p in t.partitions]}
            for t in body.topics]}

    return await broker.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.commit_offsets(body, version, token, now, lambda t: _topic_name(broker, t)),
        everywhere,
    )


def _fetch_group(broker: Broker, group_id: str, topics: Any, require_stable: bool) -> dict[str, Any]:
    """One group's part of an OffsetFetch response: its topics and its error code."""
    wanted = None if topics is None else [
        (_topic_name(broker, t), list(getattr(t, "partition_indexes", ()))) for t in topics
    ]
    if wanted is not None:
        wanted = [(name, partitions) for name, partitions in wanted if name is not None]

    def failed(code: ErrorCode) -> dict[str, Any]:
        return {"group_id": group_id, "error_code": code, "topics": []}

    return broker.coordinator.read(
        group_id,
        lambda shard: {"group_id": group_id, "error_code": 0,
                       "topics": shard.fetch_offsets(group_id, wanted, require_stable)},
        failed,
    )


async def handle_fetch(broker: Broker, request: Request) -> dict[str, Any]:
    body, version = request.body, request.api_version
    require_stable = getattr(body, "require_stable", False)
    if version >= 8:  # the multi-group form
        groups = [_fetch_group(broker, g.group_id, g.topics, require_stable) for g in body.groups]
        return {"throttle_time": 0, "groups": groups}
    group = _fetch_group(broker, body.group_id, body.topics, require_stable)
    topics = group["topics"]
    if version < 2 and group["error_code"] != ErrorCode.none:
        # v0-1 have no group-level error: every requested partition carries it.
        topics = [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": group["error_code"]}
            for p in t.partition_indexes]} for t in body.topics or ()]
    return {"throttle_time": 0, "topics": topics, "error_code": group["error_code"]}


async def handle_delete(broker: Broker, request: Request) -> dict[str, Any]:
    body = request.body

    def failed(code: ErrorCode) -> dict[str, Any]:
        return {"error_code": code, "throttle_time": 0, "topics": []}

    return await broker.coordinator.call(
        body.group_id, lambda shard, token, now: shard.delete_offsets(body, token, now), failed
    )
