"""The transaction coordinator's APIs: InitProducerId with a transactional id (22),
AddPartitionsToTxn (24, with KIP-890's verify_only from v4), AddOffsetsToTxn (25), EndTxn (26),
DescribeTransactions (65) and ListTransactions (66).

The decisions are the shard's (coordinator/transactions/shard.py); these handlers check what
Kafka's KafkaApis checks before the coordinator (empty ids, the timeout bound, unknown topics),
turn PRODUCER_FENCED into INVALID_PRODUCER_EPOCH for versions that predate it (KIP-588), and
shape the answers.
"""

from __future__ import annotations

import datetime
import re
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.security import access
from tidemark.coordinator.transactions.shard import NEEDS_PRODUCER_ID, describe_error
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.records.transaction_log_schema import TransactionStatus

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

NO_PRODUCER_ID = -1
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
NO_PRODUCER_EPOCH = -1


def _fenced_for(version: int, first_version: int, code: ErrorCode) -> ErrorCode:
    """Versions before `first_version` know PRODUCER_FENCED only as INVALID_PRODUCER_EPOCH."""
    if code is ErrorCode.producer_fenced and version < first_version:
        return ErrorCode.invalid_producer_epoch
    return code


def _ms(value: Any) -> int:
    return value if isinstance(value, int) else int(value.total_seconds() * 1000)


async def next_producer_id(ctx: RequestContext) -> int:
    # In a cluster a new block of ids is claimed in ZooKeeper, off the event loop.
    return await ctx.cluster.next_producer_id() if ctx.cluster is not None \
        else ctx.partitions.metadata.next_producer_id()


# -- InitProducerId -----------------------------------------------------------------------------

async def init_producer_id(ctx: RequestContext, request: Request) -> dict[str, Any]:
    """InitProducerId with a transactional id (init_producer_id.py hands these over)."""
    body, version = request.body, ctx.api_version

    def answer(code: ErrorCode, producer_id: int = NO_PRODUCER_ID, epoch: int = NO_PRODUCER_EPOCH) -> dict[str, Any]:
        return {"throttle_time": 0, "error_code": _fenced_for(version, 4, code), "producer_id": producer_id,
                "producer_epoch": epoch}

    transactional_id = body.transactional_id
    if not transactional_id or getattr(body, "enable2_pc", False):
        return answer(ErrorCode.invalid_request)
    producer_id = getattr(body, "producer_id", NO_PRODUCER_ID)
    producer_epoch = getattr(body, "producer_epoch", NO_PRODUCER_EPOCH)
    if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
        return answer(ErrorCode.invalid_request)
    expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
    timeout_ms = _ms(body.transaction_timeout)
    coordinator = ctx.transactions
    if not 0 < timeout_ms <= coordinator.shard_config.max_timeout_ms:
        return answer(ErrorCode.invalid_transaction_timeout)

    async def call(fresh: int | None) -> Any:
        return await coordinator.call(
            transactional_id,
            lambda shard, token, now: shard.init_producer_id(transactional_id, timeout_ms, expected, token, now,
                                                             fresh),
            lambda code: (code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

    result = await call(None)
    if result is NEEDS_PRODUCER_ID:
        result = await call(await next_producer_id(ctx))
        if result is NEEDS_PRODUCER_ID:  # taken over meanwhile: the client retries
            result = (ErrorCode.concurrent_transactions, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    return answer(*result)


# -- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------------------

async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]]) -> ErrorCode:
    if not transactional_id:
        return ErrorCode.invalid_request
    return await ctx.transactions.call_settled(
        transactional_id,
        lambda shard, token, now: shard.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                       token, now),
        lambda code: code)


def _topic_results(partitions: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in partitions.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": name, "results_by_partition": results} for name, results in topics.items()]


async def _transaction_result(ctx: RequestContext, version: int, transactional_id: str, producer_id: int,
                              producer_epoch: int, topics: Any, verify_only: bool = False
                              ) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's partitions and their errors, as KafkaApis answers them: unknown topics
    UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED; else the coordinator's."""
    partitions = [(topic.name, p) for topic in topics for p in topic.partitions]
    if not verify_only and not access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    refused = access.refused(ctx, access.WRITE, access.TOPIC, (topic for topic, _ in partitions))
    if refused:  # as KafkaApis: the refused topics' partitions say so, the others were not attempted
        return {tp: ErrorCode.topic_authorization_failed if tp[0] in refused else ErrorCode.operation_not_attempted
                for tp in partitions}
    unknown = {tp for tp in partitions if not ctx.partitions.has_partition(*tp)}
    if unknown:
        return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                for tp in partitions}
    if verify_only:
        if not transactional_id:
            return dict.fromkeys(partitions, ErrorCode.invalid_request)
        verified = await ctx.transactions.read(
            transactional_id,
            lambda shard: shard.verify_partitions(transactional_id, producer_id, producer_epoch, partitions),
            lambda code: dict.fromkeys(partitions, code))
        return verified
    code = await _add_partitions(ctx, transactional_id, producer_id, producer_epoch, partitions)
    return dict.fromkeys(partitions, _fenced_for(version, 2, code))


async def handle_add_partitions(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    if version <= 3:
        results = await _transaction_result(ctx, version, body.v3_and_below_transactional_id,
                                            body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                            body.v3_and_below_topics)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _topic_results(results)}
    # v4+: sent by brokers, several transactions at once, each added or only verified (KIP-890)
    if not access.allowed(ctx, access.CLUSTER_ACTION, access.CLUSTER):
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "results_by_transaction": []}
    answers = []
    for transaction in body.transactions:
        results = await _transaction_result(ctx, version, transaction.transactional_id, transaction.producer_id,
                                            transaction.producer_epoch, transaction.topics, transaction.verify_only)
        answers.append({"transactional_id": transaction.transactional_id, "topic_results": _topic_results(results)})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": answers}


async def handle_add_offsets(ctx: RequestContext, request: Request) -> dict[str, Any]:
    """The group's `__consumer_offsets` partition joins the transaction, so its TxnOffsetCommit
    records get the transaction's marker."""
    body, version = request.body, ctx.api_version
    if not access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID, body.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    # The offsets topic exists before its partition joins (its TxnOffsetCommit needs it anyway),
    # or the marker sender would take the partition for a deleted one.
    if ctx.cluster is None:
        ctx.coordinator.ensure_offsets_topic()
    elif (missing := await ctx.cluster.ensure_offsets_topic()) is not None:
        return {"throttle_time": 0, "error_code": missing}
    partition = (OFFSETS_TOPIC, ctx.coordinator.partition_for(body.group_id))
    code = await _add_partitions(ctx, body.transactional_id, body.producer_id, body.producer_epoch, [partition])
    return {"throttle_time": 0, "error_code": _fenced_for(version, 2, code)}


# -- EndTxn -------------------------------------------------------------------------------------------

async def handle_end_txn(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body, version = request.body, ctx.api_version
    transactional_id = body.transactional_id
    if not transactional_id:
        code = ErrorCode.invalid_request
    elif not access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID, transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    else:
        code = await ctx.transactions.call(
            transactional_id,
            lambda shard, token, now: shard.end_transaction(transactional_id, body.producer_id, body.producer_epoch,
                                                            body.committed, token, now),
            lambda error: error)
    # v5 (transaction.version 2) answers the producer's next id and epoch; without it they stay
    return {"throttle_time": 0, "error_code": _fenced_for(version, 2, code), "producer_id": NO_PRODUCER_ID,
            "producer_epoch": NO_PRODUCER_EPOCH}


# -- DescribeTransactions, ListTransactions --------------------------------------------------------

async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    states = []
    coordinator = ctx.transactions
    for transactional_id in request.body.transactional_ids:
        if not transactional_id:
            states.append(describe_error(transactional_id, ErrorCode.invalid_request))
            continue
        if not access.allowed(ctx, access.DESCRIBE, access.TRANSACTIONAL_ID, transactional_id):
            states.append(describe_error(transactional_id, ErrorCode.transactional_id_authorization_failed))
            continue
        states.append(await coordinator.read(
            transactional_id, lambda shard, t=transactional_id: shard.describe(t, coordinator.markers.written),
            lambda code, t=transactional_id: describe_error(t, code)))
    # -1 (no transaction started, as Kafka answers an Empty one) goes out as is: the field is not
    # nullable, so it is not left to build(), which reads negative times as null
    for state in states:
        state["transaction_start_time"] = _EPOCH + datetime.timedelta(milliseconds=state["transaction_start_time"])
    return {"throttle_time": 0, "transaction_states": states}


async def handle_list(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    states, unknown = set(), []
    for name in body.state_filters:
        status = TransactionStatus.from_kafka_name(name)
        if status is None:
            unknown.append(name)
        else:
            states.add(status)
    pattern_text = getattr(body, "transactional_id_pattern", None)
    try:
        pattern = re.compile(pattern_text) if pattern_text else None
    except re.error:
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_regular_expression,
                "unknown_state_filters": unknown, "transaction_states": []}
    if unknown and not states:  # only unknown states: nothing can match (Kafka answers none)
        listed, code = [], ErrorCode.none
    else:
        listed, code = ctx.transactions.list_transactions(frozenset(states), frozenset(body.producer_id_filters),
                                                          getattr(body, "duration_filter", -1), pattern)
        # as Kafka: only the transactional ids the principal may describe
        listed = [state for state in listed
                  if access.allowed(ctx, access.DESCRIBE, access.TRANSACTIONAL_ID, state["transactional_id"])]
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": unknown,
            "transaction_states": listed}
