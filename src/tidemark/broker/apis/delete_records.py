"""DeleteRecords: move a partition's log start offset up (KIP-107).

Records below the new log start offset are gone for consumers at once (Fetch and ListOffsets
answer from it) and the segments wholly below it are deleted. The answer's low watermark is the
log start offset. On one broker that is the whole story; on a cluster the leader must also wait
(up to the request's timeout) until every replica's log start offset has reached the requested
offset before answering, as Kafka's DelayedDeleteRecords does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.cluster.embedded import INTERNAL_TOPICS
from tidemark.log.errors import OffsetOutOfRangeError

from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

# The requested offset meaning "up to the high watermark" (Kafka's DeleteRecordsRequest.HIGH_WATERMARK).
HIGH_WATERMARK = -1


async def _delete_one(ctx: RequestContext, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
    """(error, low watermark) for one partition."""
    if not access.allowed(ctx, access.DELETE, access.TOPIC, topic):  # as Kafka
        return ErrorCode.topic_authorization_failed, -1
    if topic in INTERNAL_TOPICS:
        return ErrorCode.invalid_topic_exception, -1
    partition = ctx.partitions.partition(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, -1
    log = partition.log
    if log.offline is not None:
        return ErrorCode.kafka_storage_error, -1
    if not log.config.delete_enabled:  # a compacted log's records go only by compaction
        return ErrorCode.policy_violation, -1
    if offset == HIGH_WATERMARK:
        offset = partition.high_watermark
    if offset < 0:
        return ErrorCode.offset_out_of_range, -1
    try:
        return ErrorCode.none, await ctx.partitions.delete_records(partition, offset)
    except OffsetOutOfRangeError:  # beyond the high watermark
        return ErrorCode.offset_out_of_range, -1


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    topics = []
    for topic in request.body.topics:
        partitions = []
        for wanted in topic.partitions:
            code, low_watermark = await _delete_one(ctx, topic.name, wanted.partition_index, wanted.offset)
            partitions.append({"partition_index": wanted.partition_index, "low_watermark": low_watermark,
                               "error_code": code})
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
