"""Fetch: read whole batches below the high watermark, long-polling for min_bytes up to max_wait.

A follower's fetch (a replica id, Kafka's FetchIsolation.LOG_END) reads up to the leader's log
end instead, and tells the leader how far the follower's log reaches: that moves the high
watermark. Only the partition's leader answers; others say NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker import metrics
from tidemark.broker.errors import error_code_for
from tidemark.broker.partition import Partition

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

READ_COMMITTED = 1


def replica_id_of(body: Any) -> int:
    """The fetching replica's id (v15+ carry it in replica_state), -1 for a consumer."""
    state = getattr(body, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(body, "replica_id", -1)
    return -1 if replica_id is None else replica_id


def _refusal(partition: Partition, replica_id: int, current_leader_epoch: int) -> ErrorCode | None:
    """Why this broker does not serve this fetch of `partition` (KIP-320's epoch check), or None."""
    if replica_id >= 0 and replica_id not in partition.followers:
        return ErrorCode.not_leader_or_follower  # not a replica this broker leads
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if current_leader_epoch >= 0:
        if current_leader_epoch < partition.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current_leader_epoch > partition.leader_epoch:
            return ErrorCode.unknown_leader_epoch
    return None


def _read_all(ctx: RequestContext, body: Any,
              replica_id: int) -> tuple[list[dict[str, Any]], int, list[Partition], bool]:
    """One pass over the requested partitions: (topic responses, bytes read, partitions, any error)."""
    replicas = ctx.replicas
    # The broker's fetch.max.bytes bounds every response, whatever the client asks (KIP-74 still
    # lets the first non-empty partition return one whole batch beyond it).
    remaining = min(body.max_bytes, ctx.config["fetch.max.bytes"])
    total = 0
    errors = False
    partitions: list[Partition] = []
    aborted = [] if body.isolation_level == READ_COMMITTED else None
    responses = []
    for fetch_topic in body.topics:
        topic_id = getattr(fetch_topic, "topic_id", None)  # v13+ names topics by id
        topic, missing = replicas.resolve_topic(getattr(fetch_topic, "topic", None), topic_id)
        partition_responses = []
        for wanted in fetch_topic.partitions:
            response: dict[str, Any] = {
                "partition_index": wanted.partition, "error_code": 0, "high_watermark": -1,
                "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": aborted,
                "preferred_read_replica": -1, "records": b"",
            }
            partition_responses.append(response)
            partition = replicas.partition(topic.name, wanted.partition) if topic is not None else None
            if partition is None:
                response["error_code"] = missing or replicas.absent_code(topic.name, wanted.partition)
                errors = True
                continue
            refusal = _refusal(partition, replica_id, getattr(wanted, "current_leader_epoch", -1))
            if refusal is not None:
                response["error_code"] = refusal
                errors = True
                continue
            partitions.append(partition)
            log = partition.log
            if replica_id >= 0:
                partition.follower_fetched(replica_id, wanted.fetch_offset, ctx.clock.now_ms())
            high_watermark = partition.high_watermark
            response["high_watermark"] = high_watermark
            response["last_stable_offset"] = high_watermark
            response["log_start_offset"] = log.log_start_offset
            limit = min(wanted.partition_max_bytes, remaining)
            try:
                records = log.read(
                    wanted.fetch_offset, limit, upper_bound=log.log_end_offset if replica_id >= 0 else high_watermark,
                    min_one_batch=(total == 0)
                )
            except Exception as exc:  # noqa: BLE001 - becomes that partition's error code
                response["error_code"] = error_code_for(exc)
                metrics.REQUEST_ERRORS.labels("Fetch", response["error_code"].name).inc()
                errors = True
                continue
            response["records"] = records
            total += len(records)
            remaining = max(0, remaining - len(records))
        responses.append({"topic": getattr(fetch_topic, "topic", None), "topic_id": topic_id,
                          "partitions": partition_responses})
    return responses, total, partitions, errors


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    replica_id = replica_id_of(body)
    while True:
        responses, total, partitions, errors = _read_all(ctx, body, replica_id)
        remaining = deadline - loop.time()
        if total >= body.min_bytes or errors or remaining <= 0:
            break
        # Long poll: sleep until a fetched partition's high watermark moves (a follower: until its
        # log grows), or max_wait passes.
        watches = {partition.watch(appends=replica_id >= 0) for partition in partitions}  # shared: never cancelled
        if watches:
            await asyncio.wait(watches, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(remaining)
    metrics.BYTES_OUT.inc(total)
    return {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": responses}
