"""WriteTxnMarkers and TxnOffsetCommit: the partition leaders' and group coordinators' part of
transactions (the transaction coordinator sends the markers; producers send TxnOffsetCommit).

WriteTxnMarkers: for each marker and each partition named, this broker, as the partition's
leader, appends one control batch (the COMMIT or ABORT marker, written with the transaction's
producer id and epoch and the coordinator epoch) and answers once the high watermark passes it
(Kafka appends markers with acks=-1: fewer in-sync replicas than min.insync.replicas
answer NOT_ENOUGH_REPLICAS before the append, NOT_ENOUGH_REPLICAS_AFTER_APPEND after it). A marker whose producer epoch is older than the
partition's is refused INVALID_PRODUCER_EPOCH, one from an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED; a partition this broker does not have is
UNKNOWN_TOPIC_OR_PARTITION, one it does not lead NOT_LEADER_OR_FOLLOWER. For a
`__consumer_offsets` partition the marker goes through the group coordinator's shard, which
then commits or drops the producer's pending transactional offsets; a shard that is not active
answers NOT_LEADER_OR_FOLLOWER (as Kafka translates NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS), so the transaction coordinator retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.broker.errors import error_code_for
from tidemark.broker.security import access
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.wire import error_responses

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

MARKER_TIMEOUT_S = 30.0  # Kafka waits request.timeout.ms for a marker's replication
_RETRIABLE_AT_COORDINATOR = (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
                             ErrorCode.coordinator_not_available)


async def _committed(partition: Any, end: int, epoch: int, min_insync: int) -> ErrorCode:
    try:
        await asyncio.wait_for(partition.wait_for_high_watermark(end, epoch), MARKER_TIMEOUT_S)
    except asyncio.TimeoutError:
        return ErrorCode.request_timed_out
    except Exception as exc:  # noqa: BLE001 - a leadership lost meanwhile, a failed log
        return error_code_for(exc)
    if len(partition.isr) < min_insync:  # in the log, not as durably as acks=-1 asks: retried
        return ErrorCode.not_enough_replicas_after_append
    return ErrorCode.none


async def _offsets_marker(ctx: RequestContext, index: int, marker: Any) -> ErrorCode:
    code = await ctx.coordinator.complete_transaction(index, marker.producer_id, marker.producer_epoch,
                                                      marker.transaction_result, marker.coordinator_epoch)
    return ErrorCode.not_leader_or_follower if code in _RETRIABLE_AT_COORDINATOR else code


def _append(ctx: RequestContext, topic: str, index: int, marker: Any) -> ErrorCode | asyncio.Future:
    """Write one partition's marker: its error, or the wait for its replication."""
    partition = ctx.partitions.partition(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if topic == OFFSETS_TOPIC:
        return asyncio.ensure_future(_offsets_marker(ctx, index, marker))
    # Kafka appends markers with acks=-1: too few in-sync replicas refuse the marker before it is
    # written, and the transaction coordinator retries it.
    resolved, _ = ctx.partitions.resolve_topic(topic, None)
    min_insync = ctx.config.min_insync_replicas(resolved.configs if resolved is not None else {})
    if len(partition.isr) < min_insync:
        return ErrorCode.not_enough_replicas
    try:
        info, _ = partition.log.append_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                              marker.coordinator_epoch, leader_epoch=partition.leader_epoch,
                                              now_ms=ctx.clock.now_ms())
    except Exception as exc:  # noqa: BLE001 - becomes that partition's error code
        return error_code_for(exc)
    ctx.partitions.schedule_flush(partition)
    partition.appended()
    return asyncio.ensure_future(_committed(partition, info.last_offset + 1, partition.leader_epoch, min_insync))


async def handle_write_txn_markers(ctx: RequestContext, request: Request) -> dict[str, Any]:
    if not access.allowed(ctx, access.CLUSTER_ACTION, access.CLUSTER):  # as Kafka: brokers only
        return error_responses.write_txn_markers(request.body, ctx.api_version, ErrorCode.cluster_authorization_failed)
    markers = []
    waits: list[tuple[dict[str, Any], asyncio.Future]] = []
    # Every append happens before the first await: markers reach each log in request order.
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                answer: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none}
                outcome = _append(ctx, topic.name, index, marker)
                if isinstance(outcome, ErrorCode):
                    answer["error_code"] = outcome
                else:
                    waits.append((answer, outcome))
                partitions.append(answer)
            topics.append({"name": topic.name, "partitions": partitions})
        markers.append({"producer_id": marker.producer_id, "topics": topics})
    for answer, wait in waits:
        answer["error_code"] = await wait
    for marker in markers:
        for topic in marker["topics"]:
            for answer in topic["partitions"]:
                if answer["error_code"] != ErrorCode.none:
                    metrics.REQUEST_ERRORS.labels("WriteTxnMarkers", answer["error_code"].name).inc()
    return {"markers": markers}


async def handle_txn_offset_commit(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    # As Kafka: WRITE on the transactional id, READ on the group (each refusal the whole request's),
    # READ on each topic: a refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED and the
    # others are committed.
    if not access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID, body.transactional_id):
        return error_responses.txn_offset_commit(body, version, ErrorCode.transactional_id_authorization_failed)
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return error_responses.txn_offset_commit(body, version, ErrorCode.group_authorization_failed)
    refused = access.refused(ctx, access.READ, access.TOPIC, (t.name for t in body.topics))
    readable = dataclasses.replace(body, topics=tuple(t for t in body.topics if t.name not in refused)) \
        if refused else body
    # None readable: the coordinator is not asked (nothing to commit).
    response = await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.txn_commit_offsets(readable, token, now),
        lambda code: error_responses.txn_offset_commit(readable, version, code),
    ) if readable.topics else {"throttle_time": 0, "topics": []}
    if not refused:
        return response
    answered = iter(response["topics"])  # one per readable topic, in the request's order
    denied = ErrorCode.topic_authorization_failed
    return {**response, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": denied}
                                        for p in t.partitions]}
        if t.name in refused else next(answered) for t in body.topics]}
