"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic configs, read-only broker configs.

A topic's overrides live with the topic in the cluster metadata; PartitionManager persists them
and applies them to the topic's logs at once. They are validated as CreateTopics validates them
(the same bounds, Kafka's INVALID_CONFIG messages). The broker's own settings come from its
start (server.properties, --set): tidemark has no dynamic broker configs, so altering one
answers INVALID_REQUEST, as Kafka does for a setting it cannot update dynamically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.config import TOPIC_CONFIG_TYPES, ConfigError, validate_topic_configs
from tidemark.broker.config_entries import broker_entries, to_string, topic_entries
from tidemark.cluster.embedded import InvalidTopicError, TopicMetadata, validate_topic_name

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

# Kafka's ConfigResource types.
TOPIC = 2
BROKER = 4
# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType).
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class Refused(Exception):
    """A resource's request cannot be served: answered with `code` and `message`."""

    def __init__(self, code: ErrorCode, message: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _topic(ctx: RequestContext, name: str) -> TopicMetadata:
    try:
        validate_topic_name(name)
    except InvalidTopicError as exc:
        raise Refused(ErrorCode.invalid_topic_exception, str(exc)) from None
    topic = ctx.replicas.topic(name)
    if topic is None:
        raise Refused(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
    return topic


def _check_broker(ctx: RequestContext, name: str) -> None:
    """A broker resource names this broker, or "" (the cluster-wide defaults)."""
    if name == "":
        return
    try:
        broker_id = int(name)
    except ValueError:
        raise Refused(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {name}") from None
    if broker_id != ctx.node.id:
        raise Refused(ErrorCode.invalid_request,
                      f"Unexpected broker id, expected {ctx.node.id} or empty string, but received {name}")


def _unsupported(resource_type: int) -> Refused:
    return Refused(ErrorCode.invalid_request, f"Unsupported resource type: {resource_type}")


# -- DescribeConfigs ---------------------------------------------------------------------------

def _describe_one(ctx: RequestContext, resource: Any, include_synonyms: bool) -> dict[str, Any]:
    result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
              "resource_name": resource.resource_name, "configs": []}
    name = resource.resource_name
    try:
        if resource.resource_type == TOPIC:
            entries = topic_entries(ctx.config, _topic(ctx, name).configs, include_synonyms)
        elif resource.resource_type == BROKER:
            _check_broker(ctx, name)
            # "": the cluster-wide dynamic defaults, of which there are none.
            entries = broker_entries(ctx.config, include_synonyms) if name else []
        else:
            raise _unsupported(resource.resource_type)
    except Refused as refused:
        return {**result, "error_code": refused.code, "error_message": refused.message}
    keys = resource.configuration_keys
    if keys:  # null or empty: every config
        entries = [entry for entry in entries if entry["name"] in keys]
    return {**result, "configs": entries}


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    include_synonyms = getattr(body, "include_synonyms", False)
    return {"throttle_time": 0, "results": [_describe_one(ctx, r, include_synonyms) for r in body.resources]}


# -- AlterConfigs and IncrementalAlterConfigs ----------------------------------------------------

# (a topic's current overrides, the request's configs) -> the topic's new overrides, as text
NewOverrides = Callable[["RequestContext", TopicMetadata, Any], dict[str, str]]


async def _alter_one(ctx: RequestContext, resource: Any, validate_only: bool, new_overrides: NewOverrides) -> None:
    names = [config.name for config in resource.configs]
    if len(set(names)) != len(names):
        raise Refused(ErrorCode.invalid_request, "Error due to duplicate config keys")
    if resource.resource_type == TOPIC:
        topic = _topic(ctx, resource.resource_name)
        try:
            configs = validate_topic_configs(new_overrides(ctx, topic, resource.configs))
        except ConfigError as exc:
            raise Refused(ErrorCode.invalid_config, str(exc)) from None
        if not validate_only and ctx.cluster is not None:  # a ZooKeeper write, off the event loop
            await ctx.cluster.set_topic_configs(topic.name, configs)
        elif not validate_only:
            ctx.replicas.set_topic_configs(topic.name, configs)
    elif resource.resource_type == BROKER:
        _check_broker(ctx, resource.resource_name)
        if names:
            raise Refused(ErrorCode.invalid_request,
                          f"Cannot update these configs dynamically: {', '.join(sorted(names))}")
    else:
        raise _unsupported(resource.resource_type)


async def _alter(ctx: RequestContext, request: Request, new_overrides: NewOverrides) -> dict[str, Any]:
    body = request.body
    keys = [(r.resource_type, r.resource_name) for r in body.resources]
    duplicated = {key for key in keys if keys.count(key) > 1}
    responses = []
    for key, resource in zip(keys, body.resources):
        code, message = ErrorCode.none, None
        try:
            if key in duplicated:  # Kafka refuses every copy of a resource named twice
                raise Refused(ErrorCode.invalid_request, "Each resource must appear at most once.")
            await _alter_one(ctx, resource, body.validate_only, new_overrides)
        except Refused as refused:
            code, message = refused.code, refused.message
        responses.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                          "resource_name": resource.resource_name})
    return {"throttle_time": 0, "responses": responses}


def _replace(ctx: RequestContext, topic: TopicMetadata, configs: Any) -> dict[str, str]:
    """AlterConfigs: the request's configs become the topic's overrides, all others go."""
    return {config.name: config.value for config in configs if config.value is not None}


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _incremental(ctx: RequestContext, topic: TopicMetadata, configs: Any) -> dict[str, str]:
    """IncrementalAlterConfigs: each operation on the topic's current overrides. APPEND and
    SUBTRACT work on list configs, from the topic's effective value (its override, or the broker's
    default)."""
    overrides = {name: to_string(value) for name, value in topic.configs.items()}
    defaults = ctx.config.topic_defaults()
    for config in configs:
        name, op = config.name, config.config_operation
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise Refused(ErrorCode.invalid_request, f"Unknown config operation {op} for {name}")
        if op != DELETE and config.value is None:
            raise Refused(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        if op == SET:
            overrides[name] = config.value
        elif op == DELETE:
            overrides.pop(name, None)
        else:
            if name not in TOPIC_CONFIG_TYPES:
                raise Refused(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            if TOPIC_CONFIG_TYPES[name] != "LIST":
                verb = "append" if op == APPEND else "subtract"
                raise Refused(ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {name}")
            current = _split(overrides.get(name, to_string(defaults.get(name, ""))))
            values = _split(config.value)
            if op == APPEND:
                updated = current + [v for v in values if v not in current]
            else:
                updated = [v for v in current if v not in values]
            overrides[name] = ",".join(updated)
    return overrides


async def handle_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, _replace)


async def handle_incremental_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, _incremental)
