"""Build kio response entities from plain dicts, for any version of an API.

Handlers describe a response once, with Kafka's field names; fields a version does not have are
dropped, fields it has but the dict omits take the schema default. Plain ints become ErrorCode,
milliseconds become timedeltas, so handler code stays free of kio's wrapper types.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _convert_error_code(value: Any) -> ErrorCode:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _convert_timedelta(value: Any) -> datetime.timedelta:
    return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)


def _convert_datetime(value: Any) -> datetime.datetime | None:
    if value is None or isinstance(value, datetime.datetime):
        return value
    if value < 0:
        return None
    return _EPOCH + datetime.timedelta(milliseconds=value)


_SCALAR_CONVERTERS = {
    "error_code": _convert_error_code,
    "timedelta_i32": _convert_timedelta,
    "timedelta_i64": _convert_timedelta,
    "datetime_i64": _convert_datetime,
}


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    nested: type | None  # entity class of a nested struct or of array items
    is_array: bool
    convert: typing.Callable[[Any], Any] | None
    required: bool  # no schema default: build() supplies an empty value when omitted
    nullable: bool
    kafka_type: str


def _empty_value(plan: _FieldPlan) -> Any:
    """The value an omitted required field gets: null, an empty array, zero or ""."""
    if plan.nullable:
        return None
    if plan.is_array:
        return ()
    if plan.nested is not None:
        return build(plan.nested, {})
    if plan.kafka_type == "string":
        return ""
    if plan.kafka_type == "bool":
        return False
    if plan.kafka_type == "uuid":
        return None
    if plan.kafka_type == "bytes" or plan.kafka_type == "records":
        return b""
    value: Any = 0
    return plan.convert(value) if plan.convert is not None else value


@cache
def _plan(cls: type) -> tuple[_FieldPlan, ...]:
    hints = typing.get_type_hints(cls)
    plans = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        nested = None
        is_array = False
        candidates = [hint, *typing.get_args(hint)]
        for candidate in candidates:
            origin = typing.get_origin(candidate)
            if origin is tuple:
                is_array = True
                item = typing.get_args(candidate)[0]
                if dataclasses.is_dataclass(item):
                    nested = item
                break
            if dataclasses.is_dataclass(candidate):
                nested = candidate
                break
        kafka_type = field.metadata.get("kafka_type", "")
        convert = _SCALAR_CONVERTERS.get(kafka_type)
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        nullable = type(None) in typing.get_args(hint)
        plans.append(_FieldPlan(field.name, nested, is_array, convert, required, nullable, kafka_type))
    return tuple(plans)


def build(cls: type, data: dict[str, Any] | Any) -> Any:
    """Return an instance of the kio dataclass `cls` from `data` (a dict, or already an entity)."""
    if not isinstance(data, dict):
        return data
    kwargs = {}
    for plan in _plan(cls):
        if plan.name not in data:
            if plan.required:
                kwargs[plan.name] = _empty_value(plan)
            continue
        value = data[plan.name]
        if value is not None:
            if plan.nested is not None:
                if plan.is_array:
                    value = tuple(build(plan.nested, item) for item in value)
                else:
                    value = build(plan.nested, value)
            elif plan.is_array:
                value = tuple(value)
            elif plan.convert is not None:
                value = plan.convert(value)
        elif plan.convert is _convert_datetime:
            value = None
        kwargs[plan.name] = value
    return cls(**kwargs)


def has_field(cls: type, name: str) -> bool:
    return any(plan.name == name for plan in _plan(cls))
