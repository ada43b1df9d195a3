"""ListOffsets: earliest, latest, max timestamp or the first offset at or after a timestamp."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.wire.list_offsets_v0 import ListOffsetsV0Request, ListOffsetsV0Response

from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.replication.partition import Partition
    from tidemark.wire.codec import Request

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def lookup(partition: Partition, timestamp: int, isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int]:
    """(offset, timestamp) answering a ListOffsets query; (-1, -1) when no record qualifies.
    Nothing at or past the last fetchable offset counts: the high watermark, or for
    read_committed the last stable offset (Kafka's fetchOffsetForTimestamp)."""
    log = partition.log
    bound = log.last_stable_offset if isolation_level == READ_COMMITTED else partition.high_watermark
    if timestamp == LATEST:
        return bound, -1
    if timestamp == EARLIEST:
        return log.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_entry()
    else:
        found = log.offset_for_timestamp(timestamp, upper_bound=bound)
    if found is None or found[0] >= bound:
        return -1, -1
    return found


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any] | ListOffsetsV0Response:
    body = request.body
    if isinstance(body, ListOffsetsV0Request):
        return _handle_v0(ctx, body)
    topics = []
    for wanted_topic in body.topics:
        partitions = []
        for wanted in wanted_topic.partitions:
            partition, code = ctx.partitions.leader_partition(wanted_topic.name, wanted.partition_index)
            if not access.allowed(ctx, access.DESCRIBE, access.TOPIC, wanted_topic.name):  # as Kafka
                partition, code = None, ErrorCode.topic_authorization_failed
            if partition is None:
                partitions.append({"partition_index": wanted.partition_index, "error_code": code,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            offset, timestamp = lookup(partition, wanted.timestamp, getattr(body, "isolation_level", READ_UNCOMMITTED))
            partitions.append({"partition_index": wanted.partition_index, "error_code": 0,
                               "timestamp": timestamp, "offset": offset,
                               "leader_epoch": partition.leader_epoch if offset >= 0 else -1})
        topics.append({"name": wanted_topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _handle_v0(ctx: RequestContext, body: ListOffsetsV0Request) -> ListOffsetsV0Response:
    topics = []
    for name, wanted_partitions in body.topics:
        partitions = []
        for index, timestamp, max_num_offsets in wanted_partitions:
            partition, code = ctx.partitions.leader_partition(name, index)
            if not access.allowed(ctx, access.DESCRIBE, access.TOPIC, name):
                partition, code = None, ErrorCode.topic_authorization_failed
            if partition is None:
                partitions.append((index, int(code), ()))
                continue
            offset, _ = lookup(partition, timestamp)
            offsets = (offset,) if offset >= 0 and max_num_offsets > 0 else ()
            partitions.append((index, 0, offsets))
        topics.append((name, tuple(partitions)))
    return ListOffsetsV0Response(topics=tuple(topics))
