"""CreateTopics, CreatePartitions and DeleteTopics on the embedded single-node cluster."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.config import ConfigError, validate_topic_configs
from tidemark.cluster.embedded import (
    INTERNAL_TOPICS,
    InvalidTopicError,
    validate_topic_name,
)

from tidemark.broker.cluster import cluster_error_code
from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


async def _create_one(ctx: RequestContext, item: Any, validate_only: bool) -> dict[str, Any]:
    replicas = ctx.partitions
    name = item.name

    def failed(code: ErrorCode, message: str) -> dict[str, Any]:
        return {"name": name, "topic_id": None, "error_code": code, "error_message": message, "configs": None}

    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        return failed(ErrorCode.invalid_topic_exception, str(exc))
    if replicas.topic(name) is not None:
        return failed(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    if name in INTERNAL_TOPICS:
        return failed(ErrorCode.invalid_request, f"Topic '{name}' is internal: the broker creates it.")
    partitions = item.num_partitions
    if item.assignments:
        if partitions != -1 or item.replication_factor != -1:
            return failed(ErrorCode.invalid_request, "Both assignments and partitions/replication factor given.")
        if ctx.cluster is None and any(list(a.broker_ids) != [ctx.node.id] for a in item.assignments):
            return failed(ErrorCode.invalid_replica_assignment, "Replicas must be this broker only.")
        partitions = len(item.assignments)
    if partitions == -1:
        partitions = ctx.config["num.partitions"]
    if partitions < 1:
        return failed(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
    if (too_many := _over_partition_limit(ctx, partitions)) is not None:
        return failed(ErrorCode.invalid_partitions, too_many)
    replication_factor = item.replication_factor
    if replication_factor == -1:
        replication_factor = ctx.config["default.replication.factor"]
    if replication_factor < 1:
        return failed(ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0.")
    live = 1 if ctx.cluster is None else len(ctx.cluster.snapshot.brokers)
    if replication_factor > live and not item.assignments:
        return failed(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: {live}.",
        )
    try:
        configs = validate_topic_configs({c.name: c.value for c in item.configs})
    except ConfigError as exc:
        return failed(ErrorCode.invalid_config, str(exc))
    topic_id = None
    if not validate_only and ctx.cluster is not None:
        try:
            topic_id = (await ctx.cluster.create_topic(
                name, partitions, replication_factor, {c.name: c.value for c in item.configs if c.value is not None},
                assignment={i: tuple(a.broker_ids) for i, a in enumerate(item.assignments)} or None)).topic_id
        except Exception as exc:  # noqa: BLE001 - Kafka's error for each refusal
            return failed(cluster_error_code(exc), str(exc))
    elif not validate_only:
        topic_id = replicas.create_topic(name, partitions, configs).topic_id
    return {
        "name": name,
        "topic_id": topic_id,
        "error_code": 0,
        "error_message": None,
        "num_partitions": partitions,
        "replication_factor": replication_factor,
        "configs": None,
    }


def _over_partition_limit(ctx: RequestContext, adding: int) -> str | None:
    """Why `adding` more partitions is refused (tidemark.max.partitions), or None."""
    limit = ctx.config["tidemark.max.partitions"]
    hosted = len(ctx.partitions.partitions)
    if hosted + adding <= limit:
        return None
    return (f"{adding} more partitions would bring this broker to {hosted + adding}, above "
            f"tidemark.max.partitions={limit}.")


def _duplicates(names: list[Any]) -> set[Any]:
    seen: set[Any] = set()
    return {name for name in names if name in seen or seen.add(name)}


async def handle_create(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    validate_only = getattr(body, "validate_only", False)
    duplicated = _duplicates([item.name for item in body.topics])
    results = []
    for item in body.topics:
        if item.name in duplicated:  # Kafka refuses every copy of a name given twice
            results.append({"name": item.name, "topic_id": None, "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic name.", "configs": None})
        elif not (access.allowed(ctx, access.CREATE, access.CLUSTER)
                  or access.allowed(ctx, access.CREATE, access.TOPIC, item.name)):
            results.append({"name": item.name, "topic_id": None, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": None, "configs": None})
        else:
            results.append(await _create_one(ctx, item, validate_only))
    return {"throttle_time": 0, "topics": results}


async def _create_partitions_one(ctx: RequestContext, item: Any, validate_only: bool) -> dict[str, Any]:
    def result(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
        return {"name": item.name, "error_code": code, "error_message": message}

    topic = ctx.partitions.topic(item.name)
    if topic is None:
        return result(ErrorCode.unknown_topic_or_partition, f"The topic '{item.name}' does not exist.")
    if topic.internal:
        # The offsets topic's partition count decides which partition holds each group.
        return result(ErrorCode.invalid_request, f"Topic '{item.name}' is internal: its partitions are fixed.")
    if item.count <= topic.partitions:
        return result(ErrorCode.invalid_partitions, f"Topic currently has {topic.partitions} partitions, "
                      f"which is higher than or equal to the requested {item.count}.")
    if (too_many := _over_partition_limit(ctx, item.count - topic.partitions)) is not None:
        return result(ErrorCode.invalid_partitions, too_many)
    if item.assignments is not None:
        if len(item.assignments) != item.count - topic.partitions:
            return result(ErrorCode.invalid_replica_assignment,
                          f"Increasing the number of partitions by {item.count - topic.partitions} but "
                          f"{len(item.assignments)} assignments provided.")
        if ctx.cluster is None and any(list(a.broker_ids) != [ctx.node.id] for a in item.assignments):
            return result(ErrorCode.invalid_replica_assignment, "Replicas must be this broker only.")
    if not validate_only:
        if ctx.cluster is not None:
            try:
                await ctx.cluster.add_partitions(item.name, item.count)
            except Exception as exc:  # noqa: BLE001 - Kafka's error for each refusal
                return result(cluster_error_code(exc), str(exc))
        else:
            ctx.partitions.add_partitions(item.name, item.count)
    return result(ErrorCode.none)


async def handle_create_partitions(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    duplicated = _duplicates([item.name for item in body.topics])
    results = []
    for item in body.topics:
        if item.name in duplicated:
            results.append({"name": item.name, "error_code": ErrorCode.invalid_request,
                            "error_message": "Duplicate topic name."})
        elif not access.allowed(ctx, access.ALTER, access.TOPIC, item.name):
            results.append({"name": item.name, "error_code": ErrorCode.topic_authorization_failed,
                            "error_message": None})
        else:
            results.append(await _create_partitions_one(ctx, item, body.validate_only))
    return {"throttle_time": 0, "results": results}


async def handle_delete(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    replicas = ctx.partitions
    if hasattr(body, "topic_names"):  # v0-v5
        wanted = [(name, None) for name in body.topic_names]
    else:
        wanted = [(item.name, item.topic_id) for item in body.topics]
    duplicated = _duplicates([name if name is not None else topic_id for name, topic_id in wanted])
    responses = []
    deleted = []
    for name, topic_id in wanted:
        if (name if name is not None else topic_id) in duplicated:
            responses.append({"name": name, "topic_id": topic_id, "error_code": ErrorCode.invalid_request,
                              "error_message": "Duplicate topic name or id."})
            continue
        topic, missing = replicas.resolve_topic(name, topic_id if name is None else None)
        if (topic is not None or name is not None) and \
                not access.allowed(ctx, access.DELETE, access.TOPIC, topic.name if topic is not None else name):
            responses.append({"name": name, "topic_id": topic_id, "error_code": ErrorCode.topic_authorization_failed})
            continue
        if topic is None:
            responses.append({"name": name, "topic_id": topic_id, "error_code": missing})
            continue
        if not ctx.config["delete.topic.enable"]:
            responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": ErrorCode.topic_deletion_disabled})
            continue
        if ctx.cluster is not None:
            try:
                await ctx.cluster.delete_topic(topic.name)
            except Exception as exc:  # noqa: BLE001 - Kafka's error for each refusal
                responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": cluster_error_code(exc)})
                continue
        else:
            replicas.delete_topic(topic.name)
        deleted.append(topic.name)
        responses.append({"name": topic.name, "topic_id": topic.topic_id, "error_code": 0})
    # Their committed offsets go too (tombstones), before the answer: a topic created again
    # under the name never shows a consumer the old offsets.
    await ctx.coordinator.on_topics_deleted(deleted)
    return {"throttle_time": 0, "responses": responses}
