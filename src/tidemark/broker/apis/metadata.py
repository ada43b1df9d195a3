"""Metadata: brokers, topics and partition leaders; auto-creates topics when allowed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.acl_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS
from tidemark.broker.apis.metadata_cache import partition_entries
from tidemark.broker.security import access
from tidemark.cluster.embedded import INTERNAL_TOPICS, InvalidTopicError, TopicMetadata, validate_topic_name
from tidemark.cluster.zk.assignment import RackAwareMode
from tidemark.records.offsets_schema import OFFSETS_TOPIC

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


def topic_entry(ctx: RequestContext, topic: TopicMetadata) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.internal,
        # kio entities, built once per topic and version while the topic's metadata holds
        "partitions": partition_entries(ctx, topic.name, topic.partitions, _partition_entry),
    }


def _partition_entry(ctx: RequestContext, topic: str, index: int) -> dict[str, Any]:
    """Leader, replicas and ISR of one partition: this broker alone, or the cluster's view
    (the same on every broker; no leader: LEADER_NOT_AVAILABLE, clients retry)."""
    if ctx.cluster is None:
        node = ctx.node.id
        return {"error_code": 0, "partition_index": index, "leader_id": node,
                "leader_epoch": ctx.partitions.partitions[(topic, index)].leader_epoch,
                "replica_nodes": [node], "isr_nodes": [node], "offline_replicas": []}
    snapshot = ctx.cluster.snapshot
    view = snapshot.partitions.get((topic, index))
    if view is None:
        return {"error_code": ErrorCode.leader_not_available, "partition_index": index, "leader_id": -1,
                "leader_epoch": -1, "replica_nodes": [], "isr_nodes": [], "offline_replicas": []}
    leader = view.leader if view.leader in snapshot.brokers else -1
    return {"error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
            "partition_index": index, "leader_id": leader, "leader_epoch": view.leader_epoch,
            "replica_nodes": list(view.replicas), "isr_nodes": list(view.isr),
            "offline_replicas": list(snapshot.offline_replicas(topic, index))}


async def _create(ctx: RequestContext, name: str) -> TopicMetadata | None:
    """Auto-creation (and the offsets topic's creation on request)."""
    if ctx.cluster is None:
        if name == OFFSETS_TOPIC:
            ctx.coordinator.ensure_offsets_topic()
            return ctx.partitions.topic(name)
        return ctx.partitions.create_topic(name, ctx.config["num.partitions"], {})
    try:
        if name == OFFSETS_TOPIC:
            await ctx.cluster.ensure_offsets_topic()
        else:
            # Kafka's ZooKeeper-era auto-creation assigned with RackAwareMode.Safe.
            await ctx.cluster.create_topic(name, ctx.config["num.partitions"],
                                           ctx.config["default.replication.factor"], {},
                                           rack_aware_mode=RackAwareMode.SAFE)
    except Exception:  # noqa: BLE001 - created elsewhere meanwhile, or not now: the client retries
        pass
    return ctx.partitions.topic(name)


def _error_entry(name: str | None, code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": None, "is_internal": False, "partitions": []}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    replicas = ctx.partitions
    # KIP-430 (v8+): every topic named, known or not, carries its authorized operations when asked
    # (Kafka sets them on the whole describable list); without the ask, Kafka's "omitted" value.
    ask_topic_operations = getattr(body, "include_topic_authorized_operations", False)
    # Auto-creation: v4+ carries the client's wish; older versions always allow it.
    allow_auto_create = ctx.config["auto.create.topics.enable"] and getattr(
        body, "allow_auto_topic_creation", True
    )
    requested = body.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        # As Kafka: all topics means all the principal may DESCRIBE.
        topics = [topic_entry(ctx, t) for t in replicas.metadata.topics.values()
                  if access.allowed(ctx, access.DESCRIBE, access.TOPIC, t.name)]
    else:
        topics = []
        for item in requested:
            name = item.name
            if name is None and ctx.api_version < 12:
                # v10-11 carry a topic id field but cannot name a topic by it (Kafka refuses with
                # INVALID_REQUEST), and their response cannot carry a null name.
                topics.append(_error_entry("", ErrorCode.invalid_request))
                continue
            if name is None:  # v12+ may ask by topic id
                topic = replicas.topic_by_id(item.topic_id)
                if topic is not None and not access.allowed(ctx, access.DESCRIBE, access.TOPIC, topic.name):
                    topics.append(_error_entry(None, ErrorCode.topic_authorization_failed))
                    continue
                topics.append(topic_entry(ctx, topic) if topic else _error_entry(None, ErrorCode.unknown_topic_id))
                continue
            if not access.allowed(ctx, access.DESCRIBE, access.TOPIC, name):
                topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
                continue
            topic = replicas.topic(name)
            if topic is None and name == OFFSETS_TOPIC:
                # Kafka creates its internal topic when asked for it, whatever auto-creation says
                # (monitoring tools such as Burrow read its partition count before anything else).
                topic = await _create(ctx, name)
            if topic is None and allow_auto_create and name not in INTERNAL_TOPICS:
                # As Kafka: auto-creation needs CREATE on the cluster or the topic.
                if not (access.allowed(ctx, access.CREATE, access.CLUSTER)
                        or access.allowed(ctx, access.CREATE, access.TOPIC, name)):
                    topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
                    continue
                try:
                    validate_topic_name(name)
                except InvalidTopicError:
                    topics.append(_error_entry(name, ErrorCode.invalid_topic_exception))
                    continue
                topic = await _create(ctx, name)
            topics.append(
                topic_entry(ctx, topic) if topic else _error_entry(name, ErrorCode.unknown_topic_or_partition)
            )
    for entry in topics:
        if entry["name"]:
            entry["topic_authorized_operations"] = access.operations_field(
                ctx, TOPIC_OPERATIONS, ask_topic_operations, access.TOPIC, entry["name"])
    return {
        "throttle_time": 0,
        "cluster_authorized_operations": access.operations_field(  # v8-10
            ctx, CLUSTER_OPERATIONS, getattr(body, "include_cluster_authorized_operations", False), access.CLUSTER),
        # rack: v1+ (KIP-36), from broker.rack (each broker's registration on a cluster)
        "brokers": [{"node_id": ctx.node.id, "host": ctx.node.host, "port": ctx.node.port,
                     "rack": ctx.config["broker.rack"]}] if ctx.cluster is None
        # each broker as the listener this request came in on advertises it (Kafka omits brokers
        # without that listener)
        else [{"node_id": b.id, "host": a[0], "port": a[1], "rack": b.rack}
              for b in ctx.cluster.live_brokers() if (a := b.address(ctx.listener)) is not None],
        "cluster_id": replicas.metadata.cluster_id,
        "controller_id": ctx.node.id if ctx.cluster is None else ctx.cluster.snapshot.controller_id,
        "topics": topics,
        "error_code": 0,
    }
