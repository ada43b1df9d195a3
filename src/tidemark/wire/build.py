"""Build kio entities from plain Python values.

``build(cls, value)`` turns a dict (nested dicts/lists for nested entities and arrays,
ints for millisecond durations, timestamps and error codes) into an instance of the
kio dataclass ``cls``. Missing fields take their schema default, or zero / "" / empty /
None-when-nullable. An instance of ``cls`` is returned unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from typing import Any

from kio.schema.errors import ErrorCode

from .codec import _is_nullable
from .codec import _strip_none
from .codec import _zero_value

__all__ = ("build",)

_UTC = datetime.UTC


def _convert(f: dataclasses.Field, value: Any) -> Any:
    if value is None:
        return None
    tp = _strip_none(f.type)
    origin = getattr(tp, "__origin__", None)
    if origin is tuple:
        item_tp = tp.__args__[0]
        if dataclasses.is_dataclass(item_tp):
            return tuple(build(item_tp, v) for v in value)
        kafka_type = f.metadata.get("kafka_type")
        return tuple(_primitive(kafka_type, item_tp, v) for v in value)
    if dataclasses.is_dataclass(tp):
        return build(tp, value)  # type: ignore[arg-type]
    return _primitive(f.metadata.get("kafka_type"), tp, value)


def _primitive(kafka_type: str | None, tp: Any, value: Any) -> Any:
    match kafka_type:
        case "error_code":
            return value if isinstance(value, ErrorCode) else ErrorCode(int(value))
        case "timedelta_i32" | "timedelta_i64":
            if isinstance(value, datetime.timedelta):
                return tp.parse(value)
            return tp.parse(datetime.timedelta(milliseconds=int(value)))
        case "datetime_i64":
            if isinstance(value, datetime.datetime):
                return value
            return datetime.datetime.fromtimestamp(int(value) / 1000, tz=_UTC)
    return value


@functools.cache
def _plan(cls: type) -> tuple[tuple[dataclasses.Field, bool], ...]:
    return tuple(
        (
            f,
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


def build(cls: type, value: Any) -> Any:
    """An instance of the kio dataclass ``cls`` from ``value`` (a mapping or an instance)."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, dict):
        raise TypeError(f"cannot build {cls.__name__} from {type(value).__name__}")
    kwargs = {}
    for f, has_default in _plan(cls):
        if f.name in value:
            kwargs[f.name] = _convert(f, value[f.name])
        elif not has_default:
            kwargs[f.name] = None if _is_nullable(f.type) and not _is_tuple(f) else _zero_value(f, None)
    unknown = value.keys() - kwargs.keys() - {f.name for f, _ in _plan(cls)}
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    return cls(**kwargs)


def _is_tuple(f: dataclasses.Field) -> bool:
    return getattr(_strip_none(f.type), "__origin__", None) is tuple
