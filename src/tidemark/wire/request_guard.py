"""Refuse a request body that claims more than its frame holds, before kio reads it.

kio's native reader reserves memory by the length a frame claims (an array's count, a string's
or a bytes field's length): a garbage claim of billions makes the allocation fail, and a failed
allocation in native code aborts the whole broker (no exception to catch). So the body is walked
first, by its kio schema (a plan built once per schema), and any claim larger than the bytes left
is refused the way Kafka's parser refuses it ("Tried to allocate a collection of size N, but
there are only M bytes remaining"): the frame is malformed and its connection closed.

Which bodies are walked (`needs_walk`): every flexible version (a compact count is a varint, so
any garbage byte claims a huge array), and the other versions of schemas with an array of numbers
or strings somewhere (kio preallocates those; arrays of structs it reads one by one), except
Fetch, OffsetFetch and ConsumerGroupHeartbeat: on their hot paths the walk costs several times
kio's own read, so their non-flexible versions stay exposed. Anything the walk cannot follow (a
body cut short) it leaves to kio, which refuses it with an exception; bytes past the body are not
looked at, as kio ignores them.
"""

from __future__ import annotations

import dataclasses
import functools
import struct

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, \
    get_field_tag, get_schema_field_type

from .api_keys import ApiKey
from .primitives import read_uvarint

__all__ = ["ClaimTooLarge", "check", "needs_walk"]

# Hot paths whose non-flexible versions are not walked (see the module docstring).
UNWALKED = frozenset({ApiKey.FETCH, ApiKey.OFFSET_FETCH, ApiKey.CONSUMER_GROUP_HEARTBEAT})

_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "float32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
          "datetime_i64": 8, "uuid": 16}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Plan steps: (kind, size or kafka type, nested plan, least bytes per array element)
_FIXED_VALUE, _VARINT, _STRING, _BYTES, _ENTITY, _NULLABLE_ENTITY, _ARRAY_FIXED, _ARRAY_VALUES, \
    _ARRAY_ENTITIES = range(9)


class ClaimTooLarge(ValueError):
    """A count or length in the body claims more than the rest of the frame holds."""


class _Stop(Exception):
    """The walk cannot follow the body further: kio decides."""


class _Unplannable(Exception):
    """A schema with a type the walk does not know: not walked."""


@functools.cache
def needs_walk(api_key: int, schema: type) -> bool:
    """Whether requests of this schema are walked before kio reads them."""
    if _plan(schema) is None:
        return False
    if schema.__flexible__:
        return True
    return api_key not in UNWALKED and _has_array_of_values(schema)


@functools.cache
def _has_array_of_values(schema: type) -> bool:
    for field in dataclasses.fields(schema):
        kind = classify_field(field)
        if isinstance(kind, PrimitiveTupleField):
            return True
        if isinstance(kind, EntityField | EntityTupleField) and _has_array_of_values(kind.type_):
            return True
    return False


@functools.cache
def _plan(schema: type) -> tuple[bool, tuple, int] | None:
    try:
        return _entity_plan(schema)
    except _Unplannable:
        return None


def _value_step(kafka_type: str) -> tuple[int, int]:
    if kafka_type in _FIXED:
        return _FIXED_VALUE, _FIXED[kafka_type]
    if kafka_type in ("uvarint", "varint", "varlong"):
        return _VARINT, 1
    if kafka_type == "string":
        return _STRING, 0
    if kafka_type in ("bytes", "records"):
        return _BYTES, 0
    raise _Unplannable(kafka_type)


def _least_value(kind: int, size: int, flexible: bool) -> int:
    if kind in (_FIXED_VALUE, _VARINT):
        return size
    if flexible:
        return 1  # a compact length
    return 2 if kind == _STRING else 4


@functools.cache
def _entity_plan(schema: type) -> tuple[bool, tuple, int]:
    """(flexible, the untagged fields' steps in order, the fewest bytes the entity can take)."""
    flexible = schema.__flexible__
    steps = []
    least_total = 1 if flexible else 0  # the tag section's count
    for field in dataclasses.fields(schema):
        if get_field_tag(field) is not None:
            continue  # inside the tag section
        kind = classify_field(field)
        if isinstance(kind, EntityField):
            nested = _entity_plan(kind.type_)
            nullable = type(None) in getattr(field.type, "__args__", ())
            steps.append((_NULLABLE_ENTITY if nullable else _ENTITY, 0, nested, 0))
            least_total += 1 if nullable else nested[2]
        elif isinstance(kind, EntityTupleField):
            nested = _entity_plan(kind.type_)
            steps.append((_ARRAY_ENTITIES, 0, nested, max(nested[2], 1)))
            least_total += 1 if flexible else 4
        elif isinstance(kind, PrimitiveTupleField):
            value_kind, size = _value_step(get_schema_field_type(field))
            if value_kind == _FIXED_VALUE:
                steps.append((_ARRAY_FIXED, size, None, size))
            else:
                steps.append((_ARRAY_VALUES, value_kind, None, _least_value(value_kind, size, flexible)))
            least_total += 1 if flexible else 4
        else:
            value_kind, size = _value_step(get_schema_field_type(field))
            steps.append((value_kind, size, None, 0))
            least_total += _least_value(value_kind, size, flexible)
    return flexible, tuple(steps), least_total


def _uvarint(data, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(data, pos)
    except ValueError:  # past the frame, or longer than 5 bytes: kio decides
        raise _Stop from None


def _length(data, pos: int, flexible: bool, wide: bool) -> tuple[int, int]:
    """A count or length (-1: null), and the position after it."""
    if flexible:
        value, pos = _uvarint(data, pos)
        return value - 1, pos
    unpack = _I32 if wide else _I16
    if pos + unpack.size > len(data):
        raise _Stop
    return unpack.unpack_from(data, pos)[0], pos + unpack.size


def _skip_sized(kind: int, data, pos: int, flexible: bool) -> int:
    """Past a string or bytes value, refusing a length beyond the frame."""
    length, pos = _length(data, pos, flexible, wide=kind == _BYTES)
    if length > len(data) - pos:
        raise ClaimTooLarge(f"Tried to allocate a {'string' if kind == _STRING else 'byte array'} of size "
                            f"{length}, but there are only {len(data) - pos} bytes remaining.")
    return pos + max(length, 0)


def _skip_value(kind: int, size: int, data, pos: int, flexible: bool) -> int:
    if kind == _FIXED_VALUE:
        return pos + size
    if kind == _VARINT:
        return _uvarint(data, pos)[1]
    return _skip_sized(kind, data, pos, flexible)


def _skip_entity(plan: tuple[bool, tuple, int], data, pos: int) -> int:
    flexible, steps, _ = plan
    for kind, size, nested, least in steps:
        if kind == _FIXED_VALUE:
            pos += size
        elif kind <= _BYTES:
            pos = _skip_value(kind, size, data, pos, flexible)
        elif kind == _ENTITY:
            pos = _skip_entity(nested, data, pos)
        elif kind == _NULLABLE_ENTITY:
            if pos >= len(data):
                raise _Stop
            marker = data[pos]
            pos += 1
            if marker != 0xFF:  # int8 -1: null
                pos = _skip_entity(nested, data, pos)
        else:
            count, pos = _length(data, pos, flexible, wide=True)
            if count * least > len(data) - pos:
                raise ClaimTooLarge(f"Tried to allocate a collection of size {count}, but there are only "
                                    f"{len(data) - pos} bytes remaining.")
            if count <= 0:
                continue
            if kind == _ARRAY_FIXED:
                pos += count * size
            elif kind == _ARRAY_ENTITIES:
                for _ in range(count):
                    pos = _skip_entity(nested, data, pos)
            else:
                for _ in range(count):
                    pos = _skip_value(size, 0, data, pos, flexible)
        if pos > len(data):
            raise _Stop
    if flexible:
        tags, pos = _uvarint(data, pos)
        if tags * 2 > len(data) - pos:  # each tag takes at least its number and its size
            raise ClaimTooLarge(f"{tags} tagged fields, but there are only {len(data) - pos} bytes remaining.")
        for _ in range(tags):
            _, pos = _uvarint(data, pos)
            length, pos = _uvarint(data, pos)
            pos += length
        if pos > len(data):
            raise _Stop
    return pos


def _compact_string(data, pos: int) -> int:
    """Past a compact string, refused as the plan's walk refuses it."""
    byte = data[pos]
    if byte < 0x80:  # nearly every length: one byte, and it cannot claim past a frame
        if byte - 1 > len(data) - pos - 1:
            raise ClaimTooLarge(f"Tried to allocate a string of size {byte - 1}, but there are only "
                                f"{len(data) - pos - 1} bytes remaining.")
        return pos + (byte if byte > 1 else 1)
    return _skip_sized(_STRING, data, pos, True)


def _compact_count(data, pos: int, least: int) -> tuple[int, int]:
    count, pos = _uvarint(data, pos)
    count -= 1
    if count * least > len(data) - pos:
        raise ClaimTooLarge(f"Tried to allocate a collection of size {count}, but there are only "
                            f"{len(data) - pos} bytes remaining.")
    return count, pos


def _tags(data, pos: int) -> int:
    if data[pos] == 0:
        return pos + 1
    tags, pos = _uvarint(data, pos)
    if tags * 2 > len(data) - pos:
        raise ClaimTooLarge(f"{tags} tagged fields, but there are only {len(data) - pos} bytes remaining.")
    for _ in range(tags):
        _, pos = _uvarint(data, pos)
        length, pos = _uvarint(data, pos)
        pos += length
    return pos


def _offset_commit_v8(schema: type, data, pos: int) -> None:
    """OffsetCommit v8-v9 (what clients send most, with hundreds of partitions) walked by hand with
    the plan's own checks and least sizes: the plan's walk was most of a commit's decoding."""
    _, steps, _ = _plan(schema)
    topic_least = steps[4][3]  # group_id, generation, member_id, group_instance_id, topics
    partition_least = steps[4][2][1][1][3]  # the topic's name, partitions
    pos = _compact_string(data, pos)  # group_id
    pos = _compact_string(data, pos + 4)  # generation_id_or_member_epoch, member_id
    pos = _compact_string(data, pos)  # group_instance_id
    topics, pos = _compact_count(data, pos, topic_least)
    for _ in range(topics):
        pos = _compact_string(data, pos)  # name
        partitions, pos = _compact_count(data, pos, partition_least)
        for _ in range(partitions):
            # partition_index, committed_offset, committed_leader_epoch; committed_metadata
            pos = _tags(data, _compact_string(data, pos + 16))
        pos = _tags(data, pos)
        if pos > len(data):
            raise _Stop
    _tags(data, pos)


# (api key, version) -> a walk written by hand for a hot request: the same refusals as the plan's
_HAND_WALKS = {(ApiKey.OFFSET_COMMIT, 8): _offset_commit_v8, (ApiKey.OFFSET_COMMIT, 9): _offset_commit_v8}


def check(schema: type, data, pos: int) -> None:
    """Raise ClaimTooLarge if a count or length of the request body at `pos` claims more than the
    frame holds. Only for schemas `needs_walk` chose."""
    plan = _plan(schema)
    if plan is None:
        return
    walk = _HAND_WALKS.get((schema.__api_key__, schema.__version__))
    try:
        if walk is not None:
            walk(schema, data, pos)
        else:
            _skip_entity(plan, data, pos)
    except (_Stop, IndexError):  # IndexError: a hand walk read past a body cut short
        pass
