"""DescribeClientQuotas (48) and AlterClientQuotas (49): client quotas by user and client id
(KIP-546), as Kafka answers them. Entity types "user" and "client-id"; a null name is the
default entity; the quota keys tidemark meters are producer_byte_rate, consumer_byte_rate and
request_percentage."""

from __future__ import annotations

import functools
from typing import Any

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from tidemark.broker.context import RequestContext
from tidemark.broker.quotas.manager import DEFAULT, QUOTA_KEYS, REQUEST, Entity
from tidemark.wire.codec import Request

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class _Invalid(Exception):
    pass


def _entity_parts(entity: Entity) -> dict[str, str | None]:
    """An entity as its types and names (None: the default)."""
    parts = {}
    for entity_type, name in zip(ENTITY_TYPES, entity, strict=True):
        if name is not None:
            parts[entity_type] = None if name == DEFAULT else name
    return parts


def _matches(parts: dict[str, str | None], components: Any, strict: bool) -> bool:
    for component in components:
        if component.entity_type not in parts:
            return False
        name = parts[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
        if component.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(parts) == len(components)


def _describe_error(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    seen = set()
    for component in body.components:
        if component.entity_type not in ENTITY_TYPES:
            return _describe_error(ErrorCode.invalid_request,
                                   f"Custom entity type {component.entity_type} not supported")
        if component.entity_type in seen:
            return _describe_error(ErrorCode.invalid_request,
                                   f"Duplicate {component.entity_type} filter component entity type")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return _describe_error(ErrorCode.invalid_request, f"Unknown match type {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            return _describe_error(ErrorCode.invalid_request, "Exact match requires a name")
        seen.add(component.entity_type)
    entries = []
    configs = ctx.quotas.quotas.configs if ctx.quotas is not None else {}
    for entity, values in sorted(configs.items(), key=lambda item: tuple(p or "" for p in item[0])):
        parts = _entity_parts(entity)
        if values and _matches(parts, body.components, body.strict):
            entries.append({
                "entity": [{"entity_type": t, "entity_name": n} for t, n in parts.items()],
                "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())],
            })
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": entries}


def _entity(data: Any) -> Entity:
    parts: dict[str, str] = {}
    for part in data:
        if part.entity_type not in ENTITY_TYPES:
            raise _Invalid(f"Unhandled client quota entity type: {part.entity_type}")
        if part.entity_type in parts:
            raise _Invalid(f"Duplicate {part.entity_type} entity type")
        if part.entity_name is not None and not part.entity_name and part.entity_type == USER:
            raise _Invalid("Empty user name")
        parts[part.entity_type] = DEFAULT if part.entity_name is None else part.entity_name
    if not parts:
        raise _Invalid("Invalid empty client quota entity")
    return parts.get(USER), parts.get(CLIENT_ID)


def _altered(current: dict[str, float], ops: Any) -> dict[str, float]:
    values = dict(current)
    keys = set()
    for op in ops:
        if op.key in keys:
            raise _Invalid(f"Duplicate quota key {op.key}")
        keys.add(op.key)
        if op.key not in QUOTA_KEYS:
            raise _Invalid(f"Invalid configuration key {op.key}")
        if op.remove:
            values.pop(op.key, None)
            continue
        value = float(op.value)
        if not value > 0:
            raise _Invalid(f"Quota {op.key} must be greater than 0, got {op.value}")
        if op.key != REQUEST and value != int(value):
            raise _Invalid(f"Configuration {op.key} must be a Long value")
        values[op.key] = value
    return values


async def handle_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    entries = []
    for entry in body.entries:
        echo = [{"entity_type": p.entity_type, "entity_name": p.entity_name} for p in entry.entity]
        code, message = ErrorCode.none, None
        try:
            entity = _entity(entry.entity)
            _altered(ctx.quotas.current(entity), entry.ops)  # refused before anything is written
            if not body.validate_only:  # the ops applied again to what is stored (changed meanwhile)
                metadata = ctx.partitions.metadata if ctx.cluster is None else None
                await ctx.quotas.alter(metadata, entity, functools.partial(_altered, ops=entry.ops))
        except _Invalid as exc:
            code, message = ErrorCode.invalid_request, str(exc)
        except KazooException as exc:  # ZooKeeper did not take the write (timed out, gone)
            code, message = ErrorCode.request_timed_out, f"ZooKeeper: {exc!r}"
        entries.append({"error_code": code, "error_message": message, "entity": echo})
    return {"throttle_time": 0, "entries": entries}
