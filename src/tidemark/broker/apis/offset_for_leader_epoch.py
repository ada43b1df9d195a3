"""OffsetForLeaderEpoch (KIP-101, KIP-279, KIP-320): where a leader epoch ended in this log.

Followers ask it to find where their log diverges from the leader's; consumers (librdkafka after
a leader change) to check that their position was not truncated away. The answer is the
partition log's leader epoch cache; current_leader_epoch fences callers with stale metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.replication.partition import Partition
    from tidemark.wire.codec import Request

NO_PARTITION_LEADER_EPOCH = -1  # current_leader_epoch: the caller does not know it
DEBUGGING_REPLICA_ID = -2  # the only caller a follower replica answers (Kafka's rule)


def end_offset(partition: Partition | None, current_leader_epoch: int, leader_epoch: int,
               require_leader: bool = True) -> dict[str, Any]:
    """One partition's answer, without its index (Kafka's Partition.lastOffsetForLeaderEpoch).
    Only the leader answers (a follower's log may lag or diverge), unless `require_leader` is off."""
    if partition is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition}
    if current_leader_epoch != NO_PARTITION_LEADER_EPOCH:
        if current_leader_epoch < partition.leader_epoch:
            return {"error_code": ErrorCode.fenced_leader_epoch}
        if current_leader_epoch > partition.leader_epoch:
            return {"error_code": ErrorCode.unknown_leader_epoch}
    if require_leader and not partition.is_leader:
        return {"error_code": ErrorCode.not_leader_or_follower}
    if partition.log.offline is not None:
        return {"error_code": ErrorCode.kafka_storage_error}
    epoch, offset = partition.log.end_offset_for_epoch(leader_epoch)
    return {"error_code": ErrorCode.none, "leader_epoch": epoch, "end_offset": offset}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    # replica_id (v3+) names a follower; followers and consumers get the same answer, from the
    # leader only, as from Kafka.
    require_leader = getattr(request.body, "replica_id", -1) != DEBUGGING_REPLICA_ID
    # As Kafka: CLUSTER_ACTION on the cluster (brokers), else DESCRIBE on each topic.
    cluster_action = access.allowed(ctx, access.CLUSTER_ACTION, access.CLUSTER)
    topics = []
    for wanted in request.body.topics:
        if not cluster_action and not access.allowed(ctx, access.DESCRIBE, access.TOPIC, wanted.topic):
            partitions = [{"partition": p.partition, "leader_epoch": -1, "end_offset": -1,
                           "error_code": ErrorCode.topic_authorization_failed} for p in wanted.partitions]
            topics.append({"topic": wanted.topic, "partitions": partitions})
            continue
        partitions = [{"partition": p.partition, "leader_epoch": -1, "end_offset": -1,
                       **end_offset(ctx.partitions.partition(wanted.topic, p.partition), p.current_leader_epoch,
                                    p.leader_epoch, require_leader)}
                      for p in wanted.partitions]
        topics.append({"topic": wanted.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
