"""A check, before kio reads a request body, that no array claims more elements than bytes
remain in the frame (Kafka's parser refuses such a length the same way: "Tried to allocate a
collection of size N, but there are only M bytes remaining"). kio's native reader reserves
memory for the length it is given, so a garbage length in a flexible request (a compact array's
varint) aborts the whole process.

The walk follows the kio schema of each flexible request version (a plan built once per
version). It only ever refuses an array longer than the bytes left; anything else it cannot
follow it leaves to kio, which refuses malformed bodies with an exception.
"""

from __future__ import annotations

import dataclasses
import functools
from types import NoneType, UnionType
from typing import Any, get_args, get_origin

from kio.index import load_request_schema

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "float32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8,
          "datetime_i64": 8, "uuid": 16}
_COMPACT = {"string", "bytes", "records"}


class CollectionTooLarge(ValueError):
    pass


class _Stop(Exception):
    """The walk cannot follow the body further: kio decides."""


def check(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> None:
    walk = _WALKERS.get((api_key, version))
    if walk is not None:
        try:
            walk(frame, offset)
        except (_Stop, IndexError):
            pass
        return
    plan = _plan(api_key, version)
    if plan is None:
        return
    try:
        _entity(plan, frame, offset)
    except _Stop:
        pass


def _count(frame: bytes | memoryview, offset: int) -> tuple[int, int]:
    """A compact array's element count (-1: null), refused when longer than the bytes left."""
    count, offset = _uvarint(frame, offset)
    count -= 1
    if count > len(frame) - offset:
        raise CollectionTooLarge(f"Tried to allocate a collection of size {count}, but there are only "
                                 f"{len(frame) - offset} bytes remaining.")
    return count, offset


def _skip_compact(frame: bytes | memoryview, offset: int) -> int:
    b = frame[offset]
    if b < 0x80:  # nearly every length: one byte
        return offset + (b if b > 1 else 1)
    length, offset = _uvarint(frame, offset)
    return offset + max(length - 1, 0)


def _skip_tags(frame: bytes | memoryview, offset: int) -> int:
    if frame[offset] == 0:
        return offset + 1
    tags, offset = _uvarint(frame, offset)
    if tags > len(frame) - offset:
        raise _Stop
    for _ in range(tags):
        _, offset = _uvarint(frame, offset)
        size, offset = _uvarint(frame, offset)
        offset += size
    return offset


def _offset_commit_v8(frame: bytes | memoryview, offset: int) -> None:
    """OffsetCommit v8-v9 (what clients send most, with hundreds of partitions) walked by hand:
    the generic walk of the same schema took ~3 us per partition, most of a commit's decoding."""
    offset = _skip_compact(frame, offset)  # group_id
    offset = _skip_compact(frame, offset + 4)  # generation_id_or_member_epoch, member_id
    offset = _skip_compact(frame, offset)  # group_instance_id
    topics, offset = _count(frame, offset)
    for _ in range(topics):
        offset = _skip_compact(frame, offset)  # name
        partitions, offset = _count(frame, offset)
        for _ in range(partitions):
            # partition_index, committed_offset, committed_leader_epoch; committed_metadata
            offset = _skip_tags(frame, _skip_compact(frame, offset + 16))
        offset = _skip_tags(frame, offset)
        if offset > len(frame):
            raise _Stop


# (api key, version) -> a walk written by hand for a hot request, the same checks as the plan's
_WALKERS = {(8, 8): _offset_commit_v8, (8, 9): _offset_commit_v8}


@functools.cache
def _plan(api_key: int, version: int) -> Any:
    try:
        schema = load_request_schema(api_key, version)
    except Exception:  # noqa: BLE001 - hand-written versions (no kio schema): not walked
        return None
    if not getattr(schema, "__flexible__", False):
        return None
    try:
        return _entity_plan(schema)
    except _Stop:
        return None


def _entity_plan(cls: type) -> list[tuple[str, Any]]:
    steps: list[tuple[str, Any]] = []
    for field in dataclasses.fields(cls):
        if field.metadata.get("tag") is not None:
            continue  # tagged: inside the tag buffer
        kind = field.metadata.get("kafka_type")
        field_type = field.type
        if get_origin(field_type) is UnionType:
            args = [a for a in get_args(field_type) if a is not NoneType]
            if len(args) != 1:
                raise _Stop
            nullable, field_type = True, args[0]
        else:
            nullable = False
        if get_origin(field_type) is tuple:
            inner, ellipsis = get_args(field_type)
            if ellipsis is not ...:
                raise _Stop
            if dataclasses.is_dataclass(inner):
                steps.append(("array", ("entity", _entity_plan(inner))))
            else:
                steps.append(("array", ("value", _value_plan(kind))))
        elif dataclasses.is_dataclass(field_type):
            steps.append(("nullable_entity" if nullable else "entity", _entity_plan(field_type)))
        else:
            steps.append(("value", _value_plan(kind)))
    return steps


def _value_plan(kind: Any) -> Any:
    if kind in _FIXED:
        return _FIXED[kind]
    if kind in _COMPACT:
        return "compact"
    if kind in ("uvarint", "varint", "varlong"):
        return "varint"
    raise _Stop


def _uvarint(frame: bytes | memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(frame) or shift > 63:
            raise _Stop
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def _value(step: Any, frame: bytes | memoryview, offset: int) -> int:
    if step == "compact":
        length, offset = _uvarint(frame, offset)
        return offset + max(length - 1, 0)
    if step == "varint":
        return _uvarint(frame, offset)[1]
    return offset + step


def _entity(plan: list[tuple[str, Any]], frame: bytes | memoryview, offset: int) -> int:
    for kind, inner in plan:
        if kind == "value":
            offset = _value(inner, frame, offset)
        elif kind == "array":
            count, offset = _uvarint(frame, offset)
            count -= 1  # compact: length + 1, 0 for null
            if count > len(frame) - offset:
                raise CollectionTooLarge(f"Tried to allocate a collection of size {count}, but there are only "
                                         f"{len(frame) - offset} bytes remaining.")
            element, element_plan = inner
            for _ in range(max(count, 0)):
                offset = _entity(element_plan, frame, offset) if element == "entity" \
                    else _value(element_plan, frame, offset)
        elif kind == "nullable_entity":
            if offset >= len(frame):
                raise _Stop
            marker = frame[offset]
            offset += 1
            if marker != 0xFF:
                offset = _entity(inner, frame, offset)
        else:
            offset = _entity(inner, frame, offset)
        if offset > len(frame):
            raise _Stop
    tags, offset = _uvarint(frame, offset)
    if tags > len(frame) - offset:
        raise _Stop
    for _ in range(tags):
        _, offset = _uvarint(frame, offset)
        size, offset = _uvarint(frame, offset)
        offset += size
    if offset > len(frame):
        raise _Stop
    return offset
