"""Fetch: read whole batches below the high watermark, long-polling for min_bytes up to max_wait.

A follower's fetch (a replica id, Kafka's FetchIsolation.LOG_END) reads up to the leader's log
end instead, and tells the leader how far the follower's log reaches: that moves the high
watermark. Only the partition's leader answers followers and consumers before v11; others say
NOT_LEADER_OR_FOLLOWER. A consumer's fetch v11+ (KIP-392) may be answered by any replica, up to
that replica's high watermark (a follower's is what its leader last told it): above it the
answer is empty, past its log end OFFSET_OUT_OF_RANGE. The leader may send such a consumer to a
replica in its rack instead (`replica_selector.py`): that answer names the preferred read replica
and carries no records. A follower fetches in an incremental fetch session (`fetch_sessions.py`
has the rules): the partitions read are the session's, and the answer keeps only those with
something new.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.broker.errors import error_code_for
from tidemark.broker.security import access
from tidemark.log import errors as log_errors
from tidemark.records import iter_batches
from tidemark.replication.fetch_sessions import (FINAL_EPOCH, INITIAL_EPOCH, NO_SESSION, FetchPosition, FetchSession,
                                            PartitionKey)
from tidemark.replication.partition import Partition
from tidemark.replication.replica_selector import NO_PREFERRED_REPLICA, preferred_read_replica

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

READ_COMMITTED = 1
CLIENT_METADATA_VERSION = 11  # Fetch v11 carries the consumer's rack (KIP-392)
# Bound once: every replicated write costs the leader a follower fetch.
_CONSUMER_FETCHES = metrics.FETCH_REQUESTS.labels("consumer")
_FOLLOWER_FETCHES = metrics.FETCH_REQUESTS.labels("follower")


def replica_id_of(body: Any) -> int:
    """The fetching replica's id (v15+ carry it in replica_state), -1 for a consumer."""
    state = getattr(body, "replica_state", None)
    replica_id = state.replica_id if state is not None else getattr(body, "replica_id", -1)
    return -1 if replica_id is None else replica_id


def _refusal(partition: Partition, replica_id: int, current_leader_epoch: int,
             any_replica: bool = False) -> ErrorCode | None:
    """Why this broker does not serve this fetch of `partition` (KIP-320's epoch check), or None.
    `any_replica`: a consumer's fetch v11+, which a follower serves too (Kafka's fetchOnlyLeader
    is false for it)."""
    if replica_id >= 0 and replica_id not in partition.followers:
        return ErrorCode.not_leader_or_follower  # not a replica this broker leads
    if not partition.is_leader and not any_replica:
        return ErrorCode.not_leader_or_follower
    if current_leader_epoch >= 0:
        if current_leader_epoch < partition.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if current_leader_epoch > partition.leader_epoch:
            return ErrorCode.unknown_leader_epoch
    return None


def _requested(body: Any) -> tuple[dict[PartitionKey, FetchPosition], list[PartitionKey]]:
    """The partitions a request names, and those it forgets (an incremental one's)."""
    requested: dict[PartitionKey, FetchPosition] = {}
    for fetch_topic in body.topics:
        for wanted in fetch_topic.partitions:
            requested[(_topic_ref(fetch_topic), wanted.partition)] = FetchPosition(
                wanted.fetch_offset, wanted.partition_max_bytes, getattr(wanted, "current_leader_epoch", -1))
    forgotten = [(_topic_ref(topic), index)
                 for topic in getattr(body, "forgotten_topics_data", ()) for index in topic.partitions]
    return requested, forgotten


def _topic_ref(entity: Any) -> str | uuid.UUID:
    """How a request names a topic: by name, or from v13 by id."""
    topic_id = getattr(entity, "topic_id", None)
    return topic_id if topic_id is not None else entity.topic


def _session(ctx: RequestContext, body: Any, replica_id: int, requested: dict[PartitionKey, FetchPosition],
             forgotten: list[PartitionKey]) -> tuple[FetchSession | None, bool] | ErrorCode:
    """The request's fetch session (None without one) and whether the request is incremental,
    or the session error it gets (fetch_sessions.py has the rules)."""
    sessions = ctx.partitions.fetch_sessions
    session_id = getattr(body, "session_id", NO_SESSION)
    epoch = getattr(body, "session_epoch", FINAL_EPOCH)
    if epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        session = sessions.incremental(session_id, epoch, replica_id, requested, forgotten)
        return session if isinstance(session, ErrorCode) else (session, True)
    sessions.close(session_id)
    # Sessions key partitions by topic name, as partitions report their changes: a fetch naming
    # topics by id (v13+) is declined one.
    if epoch == INITIAL_EPOCH and replica_id >= 0 and all(isinstance(ref, str) for ref, _ in requested) \
            and _follows_any(ctx, replica_id, requested):
        return sessions.open(replica_id, requested), False
    return None, False


def _follows_any(ctx: RequestContext, replica_id: int, requested: dict[PartitionKey, FetchPosition]) -> bool:
    for ref, index in requested:
        topic, _ = _resolve(ctx, ref)
        partition = ctx.partitions.partition(topic.name, index) if topic is not None else None
        if partition is not None and replica_id in partition.followers:
            return True
    return False


def _resolve(ctx: RequestContext, ref: str | uuid.UUID) -> tuple[Any, ErrorCode]:
    if isinstance(ref, uuid.UUID):
        return ctx.partitions.resolve_topic(None, ref)
    return ctx.partitions.resolve_topic(ref, None)


def _broker_racks(ctx: RequestContext) -> dict[int, str | None]:
    """Each live broker's rack (this broker's alone without a cluster)."""
    if ctx.cluster is None:
        return {ctx.node.id: ctx.config["broker.rack"]}
    return {broker.id: broker.rack for broker in ctx.cluster.live_brokers()}


def _follower_log_starts(body: Any) -> dict[PartitionKey, int]:
    """Where a follower's logs start, for the partitions its request names (v5+)."""
    return {(_topic_ref(topic), wanted.partition): getattr(wanted, "log_start_offset", -1)
            for topic in body.topics for wanted in topic.partitions}


def _read_all(ctx: RequestContext, body: Any, replica_id: int, positions: dict[PartitionKey, FetchPosition]
              ) -> tuple[list[tuple[PartitionKey, dict[str, Any]]], int, list[Partition], bool, list[PartitionKey]]:
    """One pass over the partitions fetched: (each one's answer, bytes read, partitions, whether
    to answer at once (an error, or a preferred read replica as Kafka does), partitions left with
    records to read because the response's byte limit was spent)."""
    replicas = ctx.partitions
    # KIP-392: a consumer's fetch v11+ may read at a follower, and the leader may name another replica.
    client_metadata = replica_id < 0 and ctx.api_version >= CLIENT_METADATA_VERSION
    selector = ctx.config["replica.selector.class"] if client_metadata else None
    client_rack = getattr(body, "rack_id", None) if selector is not None else None
    racks = _broker_racks(ctx) if client_rack else {}
    log_starts = _follower_log_starts(body) if replica_id >= 0 else {}
    # The broker's fetch.max.bytes bounds every response, whatever the client asks (KIP-74 still
    # lets the first non-empty partition return one whole batch beyond it).
    remaining = min(body.max_bytes, ctx.config["fetch.max.bytes"])
    total = 0
    errors = False
    partitions: list[Partition] = []
    aborted = [] if body.isolation_level == READ_COMMITTED else None
    answers = []
    unread: list[PartitionKey] = []
    topics: dict[str | uuid.UUID, tuple[Any, ErrorCode]] = {}
    now_ms = ctx.clock.now_ms()
    for key, wanted in positions.items():
        ref, index = key
        response: dict[str, Any] = {
            "partition_index": index, "error_code": 0, "high_watermark": -1,
            "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": aborted,
            "preferred_read_replica": -1, "records": b"",
        }
        answers.append((key, response))
        if ref not in topics:
            topics[ref] = _resolve(ctx, ref)
        topic, missing = topics[ref]
        if not _may_fetch(ctx, replica_id, topic.name if topic is not None else ref):
            response["error_code"] = ErrorCode.topic_authorization_failed
            errors = True
            continue
        partition = replicas.partition(topic.name, index) if topic is not None else None
        if partition is None:
            response["error_code"] = missing or replicas.absent_code(topic.name, index)
            errors = True
            continue
        refusal = _refusal(partition, replica_id, wanted.current_leader_epoch, client_metadata)
        if refusal is not None:
            response["error_code"] = refusal
            errors = True
            continue
        partitions.append(partition)
        log = partition.log
        if client_rack:
            preferred = preferred_read_replica(selector, partition, client_rack, wanted.fetch_offset, racks, now_ms)
            if preferred != NO_PREFERRED_REPLICA:  # the consumer goes there: no read here
                response.update(preferred_read_replica=preferred, high_watermark=partition.high_watermark,
                                last_stable_offset=log.last_stable_offset, log_start_offset=log.log_start_offset)
                errors = True
                continue
        read_committed = replica_id < 0 and body.isolation_level == READ_COMMITTED
        # A read_committed consumer reads only below the last stable offset (Kafka's TXN_COMMITTED).
        upper_bound = (log.log_end_offset if replica_id >= 0 else
                       log.last_stable_offset if read_committed else partition.high_watermark)
        records = b""
        try:
            if log.offline is not None:
                raise log_errors.LogOfflineError(f"{topic.name}-{index} is offline after: {log.offline!r}")
            if wanted.fetch_offset != upper_bound or wanted.fetch_offset < log.log_start_offset:
                records = log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, remaining),
                                   upper_bound=upper_bound, min_one_batch=(total == 0))
                if not records:
                    unread.append(key)
            # else caught up: nothing to read (the common case of a session's partitions)
        except Exception as exc:  # noqa: BLE001 - becomes that partition's error code
            response["error_code"] = error_code_for(exc)
            metrics.REQUEST_ERRORS.labels("Fetch", response["error_code"].name).inc()
            errors = True
            continue
        if replica_id >= 0:
            # Only a read that succeeded says where the follower's log ends (Kafka skips the
            # update otherwise): an offset past the leader's end must not move the high
            # watermark or bring the follower back into the ISR.
            partition.follower_fetched(replica_id, wanted.fetch_offset, now_ms, log_starts.get(key, -1))
        high_watermark = partition.high_watermark
        response["high_watermark"] = high_watermark
        response["last_stable_offset"] = log.last_stable_offset
        if read_committed and records:
            response["aborted_transactions"] = _aborted(log, wanted.fetch_offset, records)
        response["log_start_offset"] = log.log_start_offset
        response["records"] = records
        total += len(records)
        remaining = max(0, remaining - len(records))
    return answers, total, partitions, errors, unread


def _may_fetch(ctx: RequestContext, replica_id: int, name: str | uuid.UUID) -> bool:
    """As Kafka: a follower's fetch needs CLUSTER_ACTION on the cluster, a consumer's READ on the
    topic (an id no topic has is answered UNKNOWN_TOPIC_ID, not refused)."""
    if ctx.authorizer is None:
        return True
    if replica_id >= 0:
        return access.allowed(ctx, access.CLUSTER_ACTION, access.CLUSTER)
    return isinstance(name, uuid.UUID) or access.allowed(ctx, access.READ, access.TOPIC, name)


def _aborted(log: Any, fetch_offset: int, records: bytes) -> list[dict[str, int]]:
    """The aborted transactions overlapping what a read_committed fetch returns: the consumer
    drops those producers' batches from each first offset until the ABORT marker."""
    end = fetch_offset
    for _, header in iter_batches(records, validate=False):
        end = header.next_offset
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in log.collect_aborted_transactions(fetch_offset, end)]


def _by_topic(answers: list[tuple[PartitionKey, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Answers grouped per topic, in the order the topics came."""
    by_topic: dict[str | uuid.UUID, list[dict[str, Any]]] = {}
    for (ref, _), answer in answers:
        by_topic.setdefault(ref, []).append(answer)
    return [{"topic": None if isinstance(ref, uuid.UUID) else ref,
             "topic_id": ref if isinstance(ref, uuid.UUID) else None, "partitions": answers}
            for ref, answers in by_topic.items()]


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    replica_id = replica_id_of(body)
    (_FOLLOWER_FETCHES if replica_id >= 0 else _CONSUMER_FETCHES).inc()
    requested, forgotten = _requested(body)
    session = _session(ctx, body, replica_id, requested, forgotten)
    if isinstance(session, ErrorCode):
        metrics.REQUEST_ERRORS.labels("Fetch", session.name).inc()
        return {"throttle_time": 0, "error_code": session, "session_id": NO_SESSION, "responses": []}
    session, incremental = session
    positions = requested if session is None else session.to_read(requested, ctx.clock.now_ms(), incremental)
    while True:
        answers, total, partitions, errors, unread = _read_all(ctx, body, replica_id, positions)
        remaining = deadline - loop.time()
        if total >= body.min_bytes or errors or remaining <= 0:
            break
        # Long poll: sleep until a fetched partition's high watermark moves (a follower: until its
        # log grows; in a session, one of the session's partitions), or max_wait passes.
        if session is not None:
            watches = {session.watch()}
        else:
            watches = {partition.watch(appends=replica_id >= 0) for partition in partitions}  # shared: never cancelled
        if watches:
            await asyncio.wait(watches, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(remaining)
        if session is not None:
            positions = {**positions, **session.take_changed()}
    if session is not None:
        # The follower names only partitions whose position moved: one the byte limit left
        # behind is read again at its next fetch rather than at the next sweep.
        session.changed.update(unread)
        # Every answer is recorded in the session (a full one too); an incremental one keeps the news.
        news = [(key, answer) for key, answer in answers if positions[key].answer_is_news(answer)]
        answers = news if incremental else answers
    metrics.BYTES_OUT.inc(total)
    return {"throttle_time": 0, "error_code": 0, "session_id": session.id if session is not None else NO_SESSION,
            "responses": _by_topic(answers)}
