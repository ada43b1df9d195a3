"""OffsetCommit, OffsetFetch and OffsetDelete: the offset manager's APIs.

OffsetCommit/OffsetFetch go to the offsets topic's coordinator, or to ZooKeeper
(broker.zk_offsets) with offsets.storage=zookeeper and for v0, as Kafka did; a v1+ commit to
ZooKeeper passes the coordinator's group checks first. With
offsets.fetch.forward.enable a group this broker does not coordinate is fetched from its
coordinator (broker.offset_fetch_forwarding) instead of answered NOT_COORDINATOR.

From v10 both name topics by id only. As in Kafka, the ids are resolved here, once per request:
the coordinator sees names, an id no topic has is answered UNKNOWN_TOPIC_ID here, and the
answers carry the ids back.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker import zk_offsets
from tidemark.broker.security import access
from tidemark.broker.offset_fetch_forwarding import ForwardFailed, OffsetFetchForwarder
from tidemark.coordinator.result import Result
from tidemark.records.offsets_schema import OFFSETS_TOPIC
from tidemark.wire import error_responses
from tidemark.wire.build import build
from tidemark.wire.offsets_v0 import RESPONSE_CLASSES

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

TOPIC_IDS_FROM = 10  # the first OffsetCommit and OffsetFetch version naming topics by id

# Topic id -> its topic's name now, or None where no topic has it (a deleted topic's id: its
# recreation gets a new one; the zero id, which kio reads as None, names no topic either).
Names = dict[uuid.UUID | None, str | None]


def _names(ctx: RequestContext, topics: Any) -> Names | None:
    """The names of the topics a v10+ request names by id, looked up once so the coordinator and
    the answer agree; None when the request names topics by name, or asks for all of them."""
    if ctx.api_version < TOPIC_IDS_FROM or topics is None:
        return None
    names: Names = {}
    for topic in topics:
        found = ctx.partitions.topic_by_id(topic.topic_id) if topic.topic_id is not None else None
        names[topic.topic_id] = found.name if found else None
    return names


def _old_version(ctx: RequestContext, api_key: int, response: dict[str, Any]) -> Any:
    """OffsetCommit v0-1 and OffsetFetch v0 answers are hand-encoded entities, not kio's."""
    cls = RESPONSE_CLASSES.get((api_key, ctx.api_version))
    return response if cls is None else build(cls, response)


# -- OffsetCommit -------------------------------------------------------------------------------

async def _commit(ctx: RequestContext, body: Any, names: Names | None) -> dict[str, Any]:
    version = ctx.api_version
    name_of = (lambda t: t.name) if names is None else (lambda t: names[t.topic_id])
    if zk_offsets.serves(ctx, zk_offsets.OFFSET_COMMIT):
        # Only v0 is unchecked, as in Kafka: from v1 the coordinator's generation and member
        # checks fence a zombie member wherever its offsets are stored.
        group_error = None if version == 0 else await ctx.coordinator.call(
            body.group_id,
            lambda shard, token, now: Result().respond(token, shard.validate_commit(body, version, now)),
            lambda code: code,
        )
        return await zk_offsets.commit(ctx, body, name_of, group_error)
    return await ctx.coordinator.call(
        body.group_id,
        lambda shard, token, now: shard.commit_offsets(body, version, token, now, name_of),
        lambda code: error_responses.offset_commit(body, version, code),
    )


def _unknown_id_commit(topic: Any) -> dict[str, Any]:
    return {"topic_id": topic.topic_id, "partitions": [
        {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_id} for p in topic.partitions]}


async def handle_commit(ctx: RequestContext, request: Request) -> Any:
    body = request.body
    # As Kafka: READ on the group (else the whole commit is refused), READ on each topic.
    if not access.allowed(ctx, access.READ, access.GROUP, body.group_id):
        return _old_version(ctx, 8, error_responses.offset_commit(body, ctx.api_version,
                                                                  ErrorCode.group_authorization_failed))
    names = _names(ctx, body.topics)
    refused = access.refused(ctx, access.READ, access.TOPIC,
                             (t.name if names is None else names[t.topic_id] for t in body.topics))
    if names is None and not refused:
        return _old_version(ctx, 8, await _commit(ctx, body, None))

    def name_of(t: Any) -> str | None:
        return t.name if names is None else names[t.topic_id]

    known = tuple(t for t in body.topics if name_of(t) is not None and name_of(t) not in refused)
    # Only the topics that exist and may be read go to the coordinator (none at all: it is not asked).
    response = await _commit(ctx, dataclasses.replace(body, topics=known), names) if known else \
        {"throttle_time": 0, "topics": []}
    answered = iter(response["topics"])  # one per known topic, in the request's order
    return _old_version(ctx, 8, {**response, "topics": [
        _unknown_id_commit(t) if name_of(t) is None else
        error_responses.offset_commit(_Topics((t,)), ctx.api_version, ErrorCode.topic_authorization_failed)["topics"][0]
        if name_of(t) in refused else next(answered)
        for t in body.topics]})


class _Topics:
    """A request body naming only these topics (for error_responses' per-partition answers)."""

    def __init__(self, topics: Any) -> None:
        self.topics = topics


# -- OffsetFetch --------------------------------------------------------------------------------

def _wanted(topics: Any, names: Names | None) -> list[tuple[str, list[int]]] | None:
    """The (topic, partitions) an OffsetFetch group asks for; None for all of them."""
    if topics is None:
        return None
    if names is None:
        return [(t.name, list(t.partition_indexes)) for t in topics]
    return [(name, list(t.partition_indexes)) for t in topics if (name := names[t.topic_id]) is not None]


async def _read_group(ctx: RequestContext, group_id: str, wanted: list[tuple[str, list[int]]] | None,
                      require_stable: bool, asked: Any = None) -> dict[str, Any]:
    """One group's part of an OffsetFetch response: its topics and its error code (v9+: a
    consumer group's member and epoch checked first, KIP-848)."""
    def read(shard: Any) -> dict[str, Any]:
        error = shard.validate_offset_fetch(group_id, getattr(asked, "member_id", None),
                                            getattr(asked, "member_epoch", -1))
        if error is not None:
            return error_responses.offset_fetch_group(group_id, error)
        return {"group_id": group_id, "error_code": 0, "topics": shard.fetch_offsets(group_id, wanted, require_stable)}

    return await ctx.coordinator.read(group_id, read, lambda code: error_responses.offset_fetch_group(group_id, code))


def _unknown_id_fetch(topic: Any) -> dict[str, Any]:
    return {"topic_id": topic.topic_id, "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": ErrorCode.unknown_topic_id} for p in topic.partition_indexes]}


def _with_topic_ids(ctx: RequestContext, group: dict[str, Any], topics: Any, names: Names | None) -> dict[str, Any]:
    """A v10 group answer, its topics named by id as Kafka names them: a requested id no topic has
    gets UNKNOWN_TOPIC_ID on each partition; an all-topics fetch leaves out the topics that no
    longer exist (they have no id)."""
    if group["error_code"] != ErrorCode.none:
        return group
    if names is None:  # all topics
        answered = []
        for entry in group["topics"]:
            topic = ctx.partitions.topic(entry["name"])
            if topic is not None:
                answered.append({**entry, "topic_id": topic.topic_id})
    else:
        found = iter(group["topics"])  # one per known topic, in the request's order
        answered = [{**next(found), "topic_id": t.topic_id} if names[t.topic_id] is not None else _unknown_id_fetch(t)
                    for t in topics]
    return {**group, "topics": answered}


async def handle_fetch(ctx: RequestContext, request: Request) -> Any:
    body, version = request.body, ctx.api_version
    require_stable = getattr(body, "require_stable", False)
    asked = [(g.group_id, g.topics) for g in body.groups] if version >= 8 else [(body.group_id, body.topics)]
    names = [_names(ctx, topics) for _, topics in asked]
    wanted = [_wanted(topics, n) for (_, topics), n in zip(asked, names)]
    # As Kafka: DESCRIBE on each group (else that group's GROUP_AUTHORIZATION_FAILED) and topic.
    denied = access.refused(ctx, access.DESCRIBE, access.GROUP, (g for g, _ in asked))
    if zk_offsets.serves(ctx, zk_offsets.OFFSET_FETCH):
        groups = list(await asyncio.gather(*(_denied_group(g) if g in denied else zk_offsets.fetch_group(ctx, g, w)
                                             for (g, _), w in zip(asked, wanted))))
    else:
        members = body.groups if version >= 8 else [None]
        groups = [await _denied_group(g) if g in denied else await _read_group(ctx, g, w, require_stable, m)
                  for (g, _), w, m in zip(asked, wanted, members)]
    if version >= TOPIC_IDS_FROM:
        groups = [_with_topic_ids(ctx, group, topics, n) for group, (_, topics), n in zip(groups, asked, names)]
    if ctx.authorizer is not None:
        groups = [_topics_described(ctx, group, w is None) for group, w in zip(groups, wanted)]
        # (a forwarded group's answer below comes from its coordinator, ids and all)
    forwarder = _forwarder(ctx)
    if version >= 8:  # the multi-group form
        if forwarder is not None:
            groups = list(await asyncio.gather(*(_forward_group(ctx, forwarder, body, group, g)
                                                 for group, g in zip(groups, body.groups))))
        return {"throttle_time": 0, "groups": groups}
    group = groups[0]
    if forwarder is not None and group["error_code"] == ErrorCode.not_coordinator:
        forwarded = await _forward(ctx, forwarder, body.group_id, body)
        if forwarded is not None:
            return forwarded
    if group["error_code"] != ErrorCode.none:
        return _old_version(ctx, 9, error_responses.offset_fetch(body, version, group["error_code"]))
    return _old_version(ctx, 9, {"throttle_time": 0, "topics": group["topics"], "error_code": ErrorCode.none})


async def _denied_group(group_id: str) -> dict[str, Any]:
    return error_responses.offset_fetch_group(group_id, ErrorCode.group_authorization_failed)


def _topics_described(ctx: RequestContext, group: dict[str, Any], all_topics: bool) -> dict[str, Any]:
    """A group's answer without the offsets of topics the principal may not DESCRIBE: left out
    of an all-topics fetch, TOPIC_AUTHORIZATION_FAILED on each partition asked for."""
    refused = access.refused(ctx, access.DESCRIBE, access.TOPIC, (t.get("name") for t in group["topics"]))
    if not refused:
        return group
    return {**group, "topics": access.topics_refused_partitions(group["topics"], refused,
                                                                ErrorCode.topic_authorization_failed, all_topics)}


def _forwarder(ctx: RequestContext) -> OffsetFetchForwarder | None:
    """The forwarder when this request may be forwarded: forwarding is on, the offsets live in
    the offsets topic, and it is not itself a forwarded request."""
    forwarder = ctx.cluster.offset_fetch_forwarder if ctx.cluster is not None else None
    if forwarder is None or forwarder.is_forwarded(ctx.client_id) or zk_offsets.serves(ctx, zk_offsets.OFFSET_FETCH):
        return None
    return forwarder


async def _forward(ctx: RequestContext, forwarder: OffsetFetchForwarder, group_id: str, body: Any) -> Any | None:
    """The coordinator's answer to `body` (its response entity), or None where there is none:
    the group's offsets partition has no leader other than this broker, or it did not answer."""
    assert ctx.cluster is not None
    leader = ctx.cluster.leader_of(OFFSETS_TOPIC, ctx.coordinator.partition_for(group_id))
    if leader is None or leader.id == ctx.node.id:
        return None
    try:
        return await forwarder.forward(leader.id, ctx.api_version, body)
    except ForwardFailed:
        return None


async def _forward_group(ctx: RequestContext, forwarder: OffsetFetchForwarder, body: Any, group: dict[str, Any],
                         asked: Any) -> Any:
    """One group of a multi-group OffsetFetch: as answered here, or, where this broker is not its
    coordinator, as its coordinator answers it alone."""
    if group["error_code"] != ErrorCode.not_coordinator:
        return group
    forwarded = await _forward(ctx, forwarder, asked.group_id, dataclasses.replace(body, groups=(asked,)))
    # In the dict form of the groups answered here: the response is encoded from dicts.
    return group if forwarded is None else dataclasses.asdict(forwarded.groups[0])


# -- OffsetDelete -------------------------------------------------------------------------------

async def handle_delete(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    # As Kafka: DELETE on the group, READ on each topic (refused topics' partitions answered
    # TOPIC_AUTHORIZATION_FAILED, the rest deleted).
    if not access.allowed(ctx, access.DELETE, access.GROUP, body.group_id):
        return error_responses.offset_delete(body, ctx.api_version, ErrorCode.group_authorization_failed)
    refused = access.refused(ctx, access.READ, access.TOPIC, (t.name for t in body.topics))
    asked = dataclasses.replace(body, topics=tuple(t for t in body.topics if t.name not in refused)) if refused else body
    response = await ctx.coordinator.call(
        body.group_id, lambda shard, token, now: shard.delete_offsets(asked, token, now),
        lambda code: error_responses.offset_delete(body, ctx.api_version, code),
    )
    if refused and response["error_code"] == ErrorCode.none:
        response = {**response, "topics": list(response["topics"]) + [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": ErrorCode.topic_authorization_failed}
                                            for p in t.partitions]} for t in body.topics if t.name in refused]}
    return response
