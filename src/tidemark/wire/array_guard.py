"""Refuse a request body whose arrays claim more elements than its frame holds, before kio reads it.

kio's native reader reserves memory for an array of numbers or strings by the count the frame
claims: a garbage count of billions makes the allocation fail, and a failed allocation in native
code aborts the whole broker (no exception to catch). A count is checked here against the bytes
left after it (every element takes at least one byte), walking the body by its schema, so such a
frame is answered as malformed (its connection closed) like any other. Only schemas with such an
array somewhere are walked (`needs_guard`).
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


def _skip_entity(schema: type, data: bytes, pos: int) -> int:
    flexible = schema.__flexible__
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue  # in the tagged-field section
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            pos = _skip_entity(kind.type_, data, pos)  # a nullable struct is not in request schemas
        elif isinstance(kind, EntityTupleField | PrimitiveTupleField):
            count, pos = _length(data, pos, flexible, wide=True)
            least = 1 if isinstance(kind, EntityTupleField) else _FIXED.get(get_schema_field_type(field), 1)
            if count * least > len(data) - pos:
                raise ArrayTooLong(f"{field.name}: {count} elements in {len(data) - pos} bytes")
            for _ in range(max(count, 0)):
                pos = _skip_entity(kind.type_, data, pos) if isinstance(kind, EntityTupleField) \
                    else _skip_value(get_schema_field_type(field), data, pos, flexible)
        else:
            pos = _skip_value(get_schema_field_type(field), data, pos, flexible)
    if flexible:
        pos = _skip_tags(data, pos)
    return pos


def check_body(schema: type, data: bytes, pos: int) -> None:
    """Raise ArrayTooLong if an array (or string) of the body at `pos` claims more than the frame
    holds. Bytes past the body are not looked at, as kio ignores them."""
    _skip_entity(schema, data, pos)
