"""Refuse a request body whose arrays claim more elements than its frame holds, before kio reads it.

kio's native reader reserves memory for an array of numbers or strings by the count the frame
claims: a garbage count of billions makes the allocation fail, and a failed allocation in native
code aborts the whole broker (no exception to catch). A count is checked here against the bytes
left after it (every element takes at least one byte), walking the body by its schema, so such a
frame is answered as malformed (its connection closed) like any other. Only schemas with such an
array somewhere are walked (`needs_guard`), and not those of Fetch, OffsetFetch and
ConsumerGroupHeartbeat (codec.py): on their hot paths the walk costs several times kio's own read
(a 6-partition OffsetFetch: about 20 us against 5 us, a steady heartbeat 35 us against 3 us, on a
loaded machine), so they stay exposed. Bytes and compact strings are
reserved by their claimed length too; their lengths are checked where a schema is walked, but a
schema with only those (Produce's records) is not walked.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, \
    get_field_tag, get_schema_field_type

__all__ = ["ArrayTooLong", "check_body", "needs_guard"]

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
          "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ArrayTooLong(ValueError):
    """A length in the body points past the end of the frame."""


@functools.cache
def needs_guard(schema: type) -> bool:
    """Whether the schema has an array of primitives anywhere (kio preallocates those)."""
    for field in dataclasses.fields(schema):
        kind = classify_field(field)
        if isinstance(kind, PrimitiveTupleField):
            return True
        if isinstance(kind, EntityField | EntityTupleField) and needs_guard(kind.type_):
            return True
    return False


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise ArrayTooLong("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _length(data: bytes, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A length or count (-1: null), and the position after it."""
    if flexible:
        value, pos = _uvarint(data, pos)
        return value - 1, pos
    unpack = _I32 if wide else _I16
    if pos + unpack.size > len(data):
        raise ArrayTooLong("truncated length")
    return unpack.unpack_from(data, pos)[0], pos + unpack.size


def _skip_value(kafka_type: str, data: bytes, pos: int, flexible: bool) -> int:
    size = _FIXED.get(kafka_type)
    if size is not None:
        return pos + size
    if kafka_type == "string":
        length, pos = _length(data, pos, flexible, wide=False)
    elif kafka_type in ("bytes", "records"):
        length, pos = _length(data, pos, flexible, wide=True)
    else:
        raise ArrayTooLong(f"unknown type {kafka_type}")
    if length > len(data) - pos:
        raise ArrayTooLong(f"a {kafka_type} of {length} bytes")
    return pos + max(length, 0)


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    if count > len(data) - pos:
        raise ArrayTooLong(f"{count} tagged fields")
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


_VALUE, _ENTITY, _ARRAY_OF_VALUES, _ARRAY_OF_ENTITIES = range(4)


@functools.cache
def _plan(schema: type) -> tuple[bool, tuple[tuple[int, str, type | None, int], ...]]:
    """(flexible, the body's untagged fields in order as (kind, kafka type, nested schema, least
    bytes per array element)), computed once per schema: the walk is on the request path."""
    fields = []
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue  # in the tagged-field section
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            fields.append((_ENTITY, "", kind.type_, 0))  # a nullable struct is not in request schemas
        elif isinstance(kind, EntityTupleField):
            fields.append((_ARRAY_OF_ENTITIES, "", kind.type_, 1))
        else:
            kafka_type = get_schema_field_type(field)
            if isinstance(kind, PrimitiveTupleField):
                fields.append((_ARRAY_OF_VALUES, kafka_type, None, _FIXED.get(kafka_type, 1)))
            else:
                fields.append((_VALUE, kafka_type, None, 0))
    return schema.__flexible__, tuple(fields)


def _skip_entity(schema: type, data: bytes, pos: int) -> int:
    flexible, fields = _plan(schema)
    for kind, kafka_type, nested, least in fields:
        if kind == _VALUE:
            size = _FIXED.get(kafka_type)
            pos = pos + size if size is not None else _skip_value(kafka_type, data, pos, flexible)
        elif kind == _ENTITY:
            pos = _skip_entity(nested, data, pos)
        else:
            count, pos = _length(data, pos, flexible, wide=True)
            if count * least > len(data) - pos:
                raise ArrayTooLong(f"{count} elements in {len(data) - pos} bytes")
            if kind == _ARRAY_OF_ENTITIES:
                for _ in range(count):
                    pos = _skip_entity(nested, data, pos)
            elif count > 0:
                size = _FIXED.get(kafka_type)
                if size is not None:
                    pos += count * size
                else:
                    for _ in range(count):
                        pos = _skip_value(kafka_type, data, pos, flexible)
    if flexible:
        pos = _skip_tags(data, pos)
    return pos


def check_body(schema: type, data: bytes, pos: int) -> None:
    """Raise ArrayTooLong if an array (or string) of the body at `pos` claims more than the frame
    holds. Bytes past the body are not looked at, as kio ignores them."""
    _skip_entity(schema, data, pos)
