"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topic configs and broker settings.

A topic's overrides live with the topic in the cluster metadata; PartitionManager persists them
and applies them to the topic's logs at once. They are validated as CreateTopics validates them
(the same bounds, Kafka's INVALID_CONFIG messages). A broker resource (this broker's id, or ""
for the cluster-wide defaults) holds the dynamic broker settings (broker/dynamic_config.py):
the settings Kafka updates dynamically are stored and applied at once, the others answer
INVALID_REQUEST, as Kafka does for a setting it cannot update dynamically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker import dynamic_config
from tidemark.broker.config import BROKER_SETTINGS, TOPIC_CONFIG_TYPES, ConfigError, validate_topic_configs
from tidemark.broker.config_entries import (
    broker_config_type, broker_entries, default_broker_entries, to_string, topic_entries,
)
from tidemark.broker.dynamic_config import DynamicConfigRefused
from tidemark.cluster.embedded import InvalidTopicError, TopicMetadata, validate_topic_name

from tidemark.broker.security import access

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
    topic = ctx.partitions.topic(name)
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


def _authorize(ctx: RequestContext, operation: Any, resource: Any) -> None:
    """As Kafka: the operation on the topic, or on the cluster for a broker resource."""
    if resource.resource_type == TOPIC and not access.allowed(ctx, operation, access.TOPIC, resource.resource_name):
        raise Refused(ErrorCode.topic_authorization_failed, None)
    if resource.resource_type == BROKER and not access.allowed(ctx, operation, access.CLUSTER):
        raise Refused(ErrorCode.cluster_authorization_failed, None)


# -- DescribeConfigs ---------------------------------------------------------------------------

def _describe_one(ctx: RequestContext, resource: Any, include_synonyms: bool) -> dict[str, Any]:
    result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
              "resource_name": resource.resource_name, "configs": []}
    name = resource.resource_name
    try:
        _authorize(ctx, access.DESCRIBE_CONFIGS, resource)
        if resource.resource_type == TOPIC:
            entries = topic_entries(ctx.config, _topic(ctx, name).configs, include_synonyms)
        elif resource.resource_type == BROKER:
            _check_broker(ctx, name)
            # "": the cluster-wide dynamic defaults, only those set.
            entries = broker_entries(ctx.config, include_synonyms) if name else \
                default_broker_entries(ctx.config, include_synonyms)
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

# (the resource's current overrides as text, the request's configs, a config's effective value
# as text, whether a config is a list) -> the resource's new overrides, as text
NewOverrides = Callable[[dict[str, str], Any, Callable[[str], str], Callable[[str], bool]], dict[str, str]]


def _topic_list(name: str) -> bool:
    if name not in TOPIC_CONFIG_TYPES:
        raise Refused(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
    return TOPIC_CONFIG_TYPES[name] == "LIST"


def _broker_list(name: str) -> bool:
    try:
        return broker_config_type(name) == "LIST"
    except KeyError:
        raise Refused(ErrorCode.invalid_request, f"Cannot update these configs dynamically: Set({name})") from None


def _broker_value(ctx: RequestContext, name: str) -> str:
    """A broker setting's value in effect, as text ("" for a kept-only setting not set)."""
    return str(to_string(ctx.config[name])) if ctx.config.is_set(name) or name in BROKER_SETTINGS else ""


async def _alter_one(ctx: RequestContext, resource: Any, validate_only: bool, new_overrides: NewOverrides) -> None:
    names = [config.name for config in resource.configs]
    if len(set(names)) != len(names):
        raise Refused(ErrorCode.invalid_request, "Error due to duplicate config keys")
    if resource.resource_type == TOPIC:
        topic = _topic(ctx, resource.resource_name)
        defaults = ctx.config.topic_defaults()
        current = {name: str(to_string(value)) for name, value in topic.configs.items()}
        try:
            configs = validate_topic_configs(new_overrides(
                current, resource.configs, lambda n: str(to_string(defaults.get(n, ""))), _topic_list))
        except ConfigError as exc:
            raise Refused(ErrorCode.invalid_config, str(exc)) from None
        if not validate_only and ctx.cluster is not None:  # a ZooKeeper write, off the event loop
            await ctx.cluster.set_topic_configs(topic.name, configs)
        elif not validate_only:
            ctx.partitions.set_topic_configs(topic.name, configs)
    elif resource.resource_type == BROKER:
        _check_broker(ctx, resource.resource_name)
        layer = dynamic_config.layer_of(resource.resource_name)
        current = dynamic_config.current_text(ctx.config, layer)
        new_overrides(current, resource.configs, lambda n: _broker_value(ctx, n), _broker_list)  # refused early

        def change(stored: dict[str, str]) -> dict[str, str]:  # on what is stored (changed meanwhile)
            return new_overrides(stored, resource.configs, lambda n: _broker_value(ctx, n), _broker_list)

        try:
            await dynamic_config.alter(ctx.config, ctx.partitions, ctx.cluster, resource.resource_name, change,
                                       validate_only)
        except DynamicConfigRefused as refused:
            raise Refused(refused.code, refused.message) from None
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
            _authorize(ctx, access.ALTER_CONFIGS, resource)
            await _alter_one(ctx, resource, body.validate_only, new_overrides)
        except Refused as refused:
            code, message = refused.code, refused.message
        responses.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                          "resource_name": resource.resource_name})
    return {"throttle_time": 0, "responses": responses}


def _replace(current: dict[str, str], configs: Any, effective: Callable[[str], str],
             is_list: Callable[[str], bool]) -> dict[str, str]:
    """AlterConfigs: the request's configs become the resource's overrides, all others go."""
    return {config.name: config.value for config in configs if config.value is not None}


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _incremental(current: dict[str, str], configs: Any, effective: Callable[[str], str],
                 is_list: Callable[[str], bool]) -> dict[str, str]:
    """IncrementalAlterConfigs: each operation on the resource's current overrides. APPEND and
    SUBTRACT work on list configs, from the effective value (the override, or what it falls back
    to)."""
    overrides = dict(current)
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
            if not is_list(name):
                verb = "append" if op == APPEND else "subtract"
                raise Refused(ErrorCode.invalid_config, f"Config value {verb} is not allowed for config key: {name}")
            values = _split(config.value)
            present = _split(overrides[name] if name in overrides else effective(name))
            if op == APPEND:
                updated = present + [v for v in values if v not in present]
            else:
                updated = [v for v in present if v not in values]
            overrides[name] = ",".join(updated)
    return overrides


async def handle_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, _replace)


async def handle_incremental_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return await _alter(ctx, request, _incremental)
