"""OffsetCommit and OffsetFetch served from ZooKeeper (offsets.storage=zookeeper, and v0 always).

As Kafka's ZooKeeper storage: a commit writes each offset as a decimal string to
/consumers/[group]/offsets/[topic]/[partition], a fetch reads it, metadata is not kept (fetches
return ""), and nothing goes to __consumer_offsets. Group generations and members are checked by
the coordinator from v1, as Kafka did; only v0 commits unchecked. What a
request commits is one ZooKeeper transaction; ZooKeeper not answering within
offsets.commit.timeout.ms fails the request with COORDINATOR_NOT_AVAILABLE (retriable), never
with a partial commit reported as done.

The store is the cluster link's (ClusterLink.offset_store), on the broker's one ZooKeeper
session: opened and closed with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.wire import error_responses
from tidemark.wire.codec import HAND_WRITTEN_RANGES
from tidemark.zk.offset_store import ZookeeperUnavailable, sorted_partitions

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.broker.context import RequestContext
    from tidemark.zk.offset_store import ZookeeperOffsetManager

log = structlog.get_logger("tidemark.zk")

OFFSET_COMMIT, OFFSET_FETCH = 8, 9
# The versions Kafka always served from ZooKeeper, whatever the storage setting.
ZOOKEEPER_ONLY_BELOW = {OFFSET_COMMIT: 1, OFFSET_FETCH: 1}


def served_versions(supported: dict[int, tuple[int, int]], config: BrokerConfig) -> dict[int, tuple[int, int]]:
    """The broker's API ranges, reaching down to OffsetCommit v0 and OffsetFetch v0 when it has
    a ZooKeeper to serve them from."""
    if not config["zookeeper.connect"]:
        return supported
    served = dict(supported)
    for key, (low, _) in HAND_WRITTEN_RANGES.items():
        if key in served:
            served[key] = (low, served[key][1])
    return served


def serves(ctx: RequestContext, api_key: int) -> bool:
    """Whether this OffsetCommit/OffsetFetch request goes to ZooKeeper."""
    return ctx.api_version < ZOOKEEPER_ONLY_BELOW[api_key] or ctx.config["offsets.storage"] == "zookeeper"


def store_for(ctx: RequestContext) -> ZookeeperOffsetManager:
    """The broker's store (zookeeper.connect is set whenever a request is served from it)."""
    assert ctx.cluster is not None, "offsets in ZooKeeper need zookeeper.connect"
    return ctx.cluster.offset_store


def _timeout_s(ctx: RequestContext) -> float:
    return ctx.config["offsets.commit.timeout.ms"] / 1000


async def commit(ctx: RequestContext, body: Any, topic_name: Callable[[Any], str | None],
                 group_error: ErrorCode | None = None) -> dict[str, Any]:
    """An OffsetCommit response (Kafka's field names) after writing the request's offsets;
    `group_error` is the coordinator's refusal of the committing member (v1+), if any."""
    max_metadata = ctx.config["offset.metadata.max.bytes"]
    offsets: dict[tuple[str, int], int] = {}
    accepted: list[dict[str, Any]] = []
    topics = []
    for topic in body.topics:
        name = topic_name(topic)
        partitions = []
        for p in topic.partitions:
            response = {"partition_index": p.partition_index, "error_code": ErrorCode.none}
            if not body.group_id:
                response["error_code"] = ErrorCode.invalid_group_id
            elif name is None or not ctx.partitions.has_partition(name, p.partition_index):
                response["error_code"] = ErrorCode.unknown_topic_or_partition
            elif group_error is not None:
                response["error_code"] = group_error
            elif p.committed_metadata is not None and len(p.committed_metadata) > max_metadata:
                response["error_code"] = ErrorCode.offset_metadata_too_large
            else:
                offsets[name, p.partition_index] = p.committed_offset
                accepted.append(response)
            partitions.append(response)
        topics.append({"name": name, "topic_id": getattr(topic, "topic_id", None), "partitions": partitions})
    try:
        await store_for(ctx).commit(body.group_id, offsets, _timeout_s(ctx))
    except ZookeeperUnavailable as exc:
        log.warning("zookeeper_commit_failed", group_id=body.group_id, partitions=len(offsets), error=str(exc))
        for response in accepted:
            response["error_code"] = ErrorCode.coordinator_not_available
    return {"throttle_time": 0, "topics": topics}


async def fetch_group(ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None) -> dict[str, Any]:
    """One group's part of an OffsetFetch response, read from ZooKeeper."""
    try:
        offsets = await store_for(ctx).fetch(group_id, wanted, _timeout_s(ctx))
    except ZookeeperUnavailable as exc:
        log.warning("zookeeper_fetch_failed", group_id=group_id, error=str(exc))
        return error_responses.offset_fetch_group(group_id, ErrorCode.coordinator_not_available)
    if wanted is None:
        wanted = sorted_partitions(offsets)
    topics = [{"name": topic, "partitions": [
        {"partition_index": p, "committed_offset": offsets[topic, p], "committed_leader_epoch": -1,
         "metadata": "", "error_code": ErrorCode.none} for p in partitions]}
        for topic, partitions in wanted]
    return {"group_id": group_id, "error_code": ErrorCode.none, "topics": topics}
