"""Build kio request and response entities from plain dicts, for any version of an API.

Handlers describe a response once, with Kafka's field names; fields a version does not have are
dropped. A key no version of the message has (a typo) is refused, and so is a field this
version has that the dict omits unless Kafka's schema gives it a default (kio's dataclass
default): a forgotten field is an error, not a silent zero. Plain ints become ErrorCode,
milliseconds become timedeltas, so handler code stays free of kio's wrapper types.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import re
import typing
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
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
    required: bool  # no default in Kafka's schema: build() refuses a dict without it
    nullable: bool
    kafka_type: str


class BuildError(ValueError):
    """A dict that does not describe the entity: a key no version has, or a required field missing."""


def _empty_value(plan: _FieldPlan) -> Any:
    """Kafka's zero value of a field (build_filled): null, an empty array, zero or ""."""
    if plan.nullable:
        return None
    if plan.is_array:
        return ()
    if plan.nested is not None:
        return _build(plan.nested, {}, (), None, True)
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


_MAX_VERSION = 30  # past any version kio has


def _message_family(cls: type) -> tuple[int, str] | None:
    """(api key, "request" or "response") of a top-level message class, kio's or one written by hand."""
    api_key = getattr(cls, "__api_key__", None)
    if api_key is None:
        return None
    kind = getattr(getattr(cls, "__type__", None), "name", None)
    if kind is None:  # written by hand: named after its kind
        kind = "request" if cls.__name__.endswith("Request") else "response" if "Response" in cls.__name__ else None
    return (int(api_key), kind) if kind in ("request", "response") else None


@cache
def _family_names(api_key: int, kind: str) -> dict[tuple[str, ...], frozenset[str]]:
    """Every field name at each path (field names from the top) in any version of the message."""
    load = load_request_schema if kind == "request" else load_response_schema
    names: dict[tuple[str, ...], set[str]] = {}

    def walk(cls: type, path: tuple[str, ...]) -> None:
        names.setdefault(path, set()).update(plan.name for plan in _plan(cls))
        for plan in _plan(cls):
            if plan.nested is not None:
                walk(plan.nested, (*path, plan.name))

    for version in range(_MAX_VERSION):
        try:
            walk(load(api_key, version), ())
        except Exception:  # noqa: BLE001 - no such version in kio
            continue
    return {path: frozenset(found) for path, found in names.items()}


@cache
def _same_named(cls: type) -> frozenset[str]:
    """Field names of the classes named like `cls` in every version's module (a nested class
    built on its own, without the path from its message)."""
    found = {plan.name for plan in _plan(cls)}
    match = re.fullmatch(r"(kio\.schema\.\w+)\.v\d+\.(request|response)", cls.__module__)
    if match is None:
        return frozenset(found)
    for version in range(_MAX_VERSION):
        try:
            module = importlib.import_module(f"{match.group(1)}.v{version}.{match.group(2)}")
        except ImportError:
            continue
        other = getattr(module, cls.__name__, None)
        if other is not None and dataclasses.is_dataclass(other):
            found.update(field.name for field in dataclasses.fields(other))
    return frozenset(found)


def _known_names(cls: type, path: tuple[str, ...], family: tuple[int, str] | None) -> frozenset[str]:
    own = frozenset(plan.name for plan in _plan(cls))
    if family is None:
        return _same_named(cls)
    return own | _family_names(*family).get(path, frozenset())


def _where(cls: type, path: tuple[str, ...], name: str) -> str:
    version = getattr(cls, "__version__", None)
    return f"{'.'.join((*path, name))} ({cls.__name__}{'' if version is None else f' v{version}'})"


def build(cls: type, data: dict[str, Any] | Any) -> Any:
    """Return an instance of the kio dataclass `cls` from `data` (a dict, or already an entity).

    Raises BuildError naming the field for a key no version of the message has, or for a field
    of this version with no default in Kafka's schema that `data` leaves out."""
    return _build(cls, data, (), _message_family(cls), False)


def build_filled(cls: type, data: dict[str, Any] | Any) -> Any:
    """build(), but a field without a default that `data` leaves out gets Kafka's zero value (0,
    "", empty, null), as Kafka's generated message classes start. For tests that only care about
    a few fields of a request; a key no version has is still refused."""
    return _build(cls, data, (), _message_family(cls), True)


def _build(cls: type, data: Any, path: tuple[str, ...], family: tuple[int, str] | None, fill: bool) -> Any:
    if not isinstance(data, dict):
        return data
    plans = _plan(cls)
    if not _plan_names(cls).issuperset(data):
        known = _known_names(cls, path, family)
        for name in data:
            if name not in known:
                raise BuildError(f"unknown field {_where(cls, path, name)}: no version of the message has it")
    kwargs = {}
    for plan in plans:
        if plan.name not in data:
            if plan.required:
                if not fill:
                    raise BuildError(f"missing field {_where(cls, path, plan.name)}: Kafka's schema gives it "
                                     "no default")
                kwargs[plan.name] = _empty_value(plan)
            continue
        value = data[plan.name]
        if value is not None:
            if plan.nested is not None:
                inner = (*path, plan.name)
                if plan.is_array:
                    value = tuple(_build(plan.nested, item, inner, family, fill) for item in value)
                else:
                    value = _build(plan.nested, value, inner, family, fill)
            elif plan.is_array:
                value = tuple(value)
            elif plan.convert is not None:
                value = plan.convert(value)
        elif plan.convert is _convert_datetime:
            value = None
        kwargs[plan.name] = value
    return cls(**kwargs)


@cache
def _plan_names(cls: type) -> frozenset[str]:
    return frozenset(plan.name for plan in _plan(cls))


def has_field(cls: type, name: str) -> bool:
    return any(plan.name == name for plan in _plan(cls))
