"""A check, before kio reads a request body, that no array claims more elements than bytes
remain in the frame (Kafka's parser refuses such a length the same way: "Tried to allocate a
collection of size N, but there are only M bytes remaining"). kio's native reader reserves
memory for the length it is given, so a garbage length aborts the whole process.

Checked so far: the KIP-554 SCRAM admin requests and flexible Metadata (v9+; the first thing
most clients send). Each spec is the body's fields in order: "str" (compact string), "bytes"
(compact bytes), "bool", "i8", "i32", "uuid", or a list (a compact array of entities with those
fields); every entity and the body end with tagged fields.
"""

from __future__ import annotations

from typing import Any

Spec = list[Any]

SPECS: dict[tuple[int, int], Spec] = {
    (50, 0): [["str"]],  # DescribeUserScramCredentials: users
    (51, 0): [["str", "i8"], ["str", "i8", "i32", "bytes", "bytes"]],  # AlterUserScramCredentials
    (3, 9): [["str"], "bool", "bool", "bool"],  # Metadata: topics, then its flags
    (3, 10): [["uuid", "str"], "bool", "bool", "bool"],
    **{(3, v): [["uuid", "str"], "bool", "bool"] for v in (11, 12, 13)},
}
_FIXED = {"bool": 1, "i8": 1, "i32": 4, "uuid": 16}


class CollectionTooLarge(ValueError):
    pass


def check(api_key: int, version: int, frame: bytes | memoryview, offset: int) -> None:
    spec = SPECS.get((api_key, version))
    if spec is not None:
        _entity(frame, offset, spec)


def _uvarint(frame: bytes | memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= len(frame) or shift > 28:
            raise CollectionTooLarge("malformed varint")
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def _entity(frame: bytes | memoryview, offset: int, spec: Spec) -> int:
    for field in spec:
        if isinstance(field, list):
            count, offset = _uvarint(frame, offset)
            count -= 1  # compact: length + 1, 0 for null
            if count > len(frame) - offset:
                raise CollectionTooLarge(f"Tried to allocate a collection of size {count}, but there are only "
                                         f"{len(frame) - offset} bytes remaining.")
            for _ in range(max(count, 0)):
                offset = _entity(frame, offset, field)
        elif field in _FIXED:
            offset += _FIXED[field]
        else:  # compact string or bytes
            length, offset = _uvarint(frame, offset)
            offset += max(length - 1, 0)
        if offset > len(frame):
            raise CollectionTooLarge("the body ends early")
    tags, offset = _uvarint(frame, offset)
    for _ in range(tags):
        _, offset = _uvarint(frame, offset)
        size, offset = _uvarint(frame, offset)
        offset += size
    if offset > len(frame):
        raise CollectionTooLarge("the body ends early")
    return offset
