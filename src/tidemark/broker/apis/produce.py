"""Produce: validate (broker.validator) and append each partition's batch, acknowledge per `acks`.

Ordering invariant: every append of a request happens before the handler's first `await`. The
connection starts handlers in arrival order, so pipelined requests on one connection (an
idempotent producer keeps up to five in flight per partition) reach the log in the order sent.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.broker.errors import error_code_for
from tidemark.broker.security import access
from tidemark.broker.validator import upconvert_produce, validate_produce
from tidemark.records import RecordValidationError

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any] | None:
    body = request.body
    acks = body.acks
    replicas = ctx.partitions
    now_ms = ctx.clock.now_ms()
    topic_responses: list[dict[str, Any]] = []
    waits = []  # acks=-1: (partition response, partition, end offset its high watermark must reach)
    # As Kafka: a transactional produce needs WRITE on its transactional id (else every partition
    # is refused), each topic WRITE (else its partitions are).
    transactional_id = getattr(body, "transactional_id", None)
    denied_all = ErrorCode.transactional_id_authorization_failed if transactional_id is not None and not \
        access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID, transactional_id) else None
    for topic_data in body.topic_data:
        topic_id = getattr(topic_data, "topic_id", None)  # v13+ names topics by id
        topic, missing = replicas.resolve_topic(getattr(topic_data, "name", None), topic_id)
        partition_responses = []
        for data in topic_data.partition_data:
            response = {"index": data.index, "error_code": 0, "base_offset": -1, "log_append_time": -1,
                        "log_start_offset": -1, "record_errors": [], "error_message": None}
            partition_responses.append(response)
            partition = replicas.partition(topic.name, data.index) if topic is not None else None
            refused = denied_all or _unauthorized(ctx, topic.name if topic is not None else getattr(topic_data, "name", None))
            if refused is not None:
                response["error_code"] = refused
                continue
            if acks not in (0, 1, -1):
                response["error_code"] = ErrorCode.invalid_required_acks
                continue
            if partition is None:
                response["error_code"] = missing or replicas.absent_code(topic.name, data.index)
                continue
            refusal = _refusal(ctx, partition, topic.configs, acks)
            if refusal is not None:
                response["error_code"] = refusal
                metrics.REQUEST_ERRORS.labels("Produce", refusal.name).inc()
                continue
            records = data.records or b""
            try:
                if ctx.api_version < 3:  # message formats v0/v1, converted on the way in as Kafka 3.x does
                    records = upconvert_produce(records, topic=topic.name, internal=topic.internal)
                header = validate_produce(records, partition.log.config, topic=topic.name,
                                          partition=data.index, internal=topic.internal)
                info = replicas.append(partition, records, now_ms, checked=header)
            except Exception as exc:  # noqa: BLE001 - every failure becomes that partition's error code
                response["error_code"] = error_code_for(exc)
                response["error_message"] = str(exc) or None
                if isinstance(exc, RecordValidationError):
                    # KIP-467 (v8+): which records were refused, so the client fails only those;
                    # Kafka also reports the log start offset here.
                    response["record_errors"] = [{"batch_index": index, "batch_index_error_message": message}
                                                 for index, message in exc.record_errors]
                    response["log_start_offset"] = partition.log.log_start_offset
                metrics.REQUEST_ERRORS.labels("Produce", response["error_code"].name).inc()
                continue
            response["base_offset"] = info.first_offset
            response["log_append_time"] = info.log_append_time
            response["log_start_offset"] = partition.log.log_start_offset
            if not info.duplicate:
                metrics.BYTES_IN.inc(len(records))
                metrics.MESSAGES_IN.inc(info.last_offset - info.first_offset + 1)
            if acks == -1:
                waits.append((response, partition, info.last_offset + 1, partition.leader_epoch,
                              _min_insync(ctx, topic.configs)))
        topic_responses.append(
            {"name": getattr(topic_data, "name", None), "topic_id": topic_id,
             "partition_responses": partition_responses}
        )
    if acks == 0:
        return None
    if waits:
        await _wait_committed(waits, body.timeout.total_seconds())
    return {"responses": topic_responses, "throttle_time": 0}


def _unauthorized(ctx: RequestContext, name: str | None) -> ErrorCode | None:
    if name is None or access.allowed(ctx, access.WRITE, access.TOPIC, name):
        return None  # (an unknown topic id is answered as such)
    return ErrorCode.topic_authorization_failed


def _min_insync(ctx: RequestContext, topic_configs: dict[str, Any]) -> int:
    return ctx.config.min_insync_replicas(topic_configs)


def _refusal(ctx: RequestContext, partition: Any, topic_configs: dict[str, Any], acks: int) -> ErrorCode | None:
    """Why this broker does not append to `partition` at all, or None: it does not lead it, or
    acks=-1 with fewer in-sync replicas than min.insync.replicas (Kafka checks before appending)."""
    if not partition.is_leader:
        return ErrorCode.not_leader_or_follower
    if acks == -1 and len(partition.isr) < _min_insync(ctx, topic_configs):
        return ErrorCode.not_enough_replicas
    return None


async def _wait_committed(waits: list[tuple[dict[str, Any], Any, int, int, int]], timeout_s: float) -> None:
    """Hold the response until each partition's high watermark covers its appended records,
    under the leader epoch that appended them (a leadership change answers
    NOT_LEADER_OR_FOLLOWER: a later leader may not have the records); if the in-sync replicas
    shrank below min.insync.replicas meanwhile, the append is answered
    NOT_ENOUGH_REPLICAS_AFTER_APPEND (it is in the log, but not as durably as asked)."""
    futures = [partition.wait_for_high_watermark(end, epoch) for _, partition, end, epoch, _ in waits]
    done, pending = await asyncio.wait(futures, timeout=max(timeout_s, 0.001))
    for (response, partition, _, _, min_insync), future in zip(waits, futures):
        if future in pending:
            future.cancel()
            response["error_code"] = ErrorCode.request_timed_out
        elif future.exception() is not None:
            response["error_code"] = error_code_for(future.exception())
        elif len(partition.isr) < min_insync:
            response["error_code"] = ErrorCode.not_enough_replicas_after_append
