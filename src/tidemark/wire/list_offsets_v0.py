"""ListOffsets v0, which kio does not cover (it starts at v1).

Older Go clients (sarama-based lag monitors) still send it. Layout from Kafka's
ListOffsetsRequest.json / ListOffsetsResponse.json at version 0, non-flexible
(int16-length strings, int32-count arrays), response header v0:

    request:  ReplicaId int32,
              Topics [Name string,
                      Partitions [PartitionIndex int32, Timestamp int64, MaxNumOffsets int32]]
    response: Topics [Name string,
                      Partitions [PartitionIndex int32, ErrorCode int16, OldStyleOffsets [int64]]]

The nested items are NamedTuples, so both ``topic.name`` and ``name, partitions = topic``
work, and a response may be built from plain tuples too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from .api_keys import ApiKey
from .primitives import I32, Reader, write_string

__all__ = (
    "ListOffsetsV0Partition",
    "ListOffsetsV0Topic",
    "ListOffsetsV0Request",
    "ListOffsetsV0ResponsePartition",
    "ListOffsetsV0ResponseTopic",
    "ListOffsetsV0Response",
    "read_request",
    "write_request",
    "read_response",
    "write_response",
)

VERSION = 0

_REQ_PARTITION = struct.Struct(">iqi")  # partition_index, timestamp, max_num_offsets
_RESP_PARTITION_HEAD = struct.Struct(">ih")  # partition_index, error_code


class ListOffsetsV0Partition(NamedTuple):
    partition_index: int
    timestamp: int
    max_num_offsets: int


class ListOffsetsV0Topic(NamedTuple):
    name: str
    partitions: tuple[ListOffsetsV0Partition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsV0Request:
    __api_key__: ClassVar[int] = ApiKey.LIST_OFFSETS
    __version__: ClassVar[int] = VERSION
    __flexible__: ClassVar[bool] = False
    replica_id: int
    topics: tuple[ListOffsetsV0Topic, ...]


class ListOffsetsV0ResponsePartition(NamedTuple):
    partition_index: int
    error_code: int
    old_style_offsets: tuple[int, ...]


class ListOffsetsV0ResponseTopic(NamedTuple):
    name: str
    partitions: tuple[ListOffsetsV0ResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsV0Response:
    __api_key__: ClassVar[int] = ApiKey.LIST_OFFSETS
    __version__: ClassVar[int] = VERSION
    __flexible__: ClassVar[bool] = False
    topics: tuple[ListOffsetsV0ResponseTopic, ...]


def read_request(buf, offset: int = 0) -> tuple[ListOffsetsV0Request, int]:
    """Decode a v0 request body at ``offset``; returns (request, bytes consumed).

    Raises ``struct.error``, ``ValueError`` or ``UnicodeDecodeError`` on bad input.
    """
    r = Reader(buf, offset)
    replica_id = r.int32()
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        parts = [ListOffsetsV0Partition(*r.unpack(_REQ_PARTITION)) for _ in range(r.count(_REQ_PARTITION.size))]
        topics.append(ListOffsetsV0Topic(name, tuple(parts)))
    return ListOffsetsV0Request(replica_id=replica_id, topics=tuple(topics)), r.pos - offset


def write_request(request: ListOffsetsV0Request) -> bytes:
    """Encode a v0 request body (used by tests and client-side tools)."""
    out = bytearray(I32.pack(request.replica_id))
    out += I32.pack(len(request.topics))
    for name, partitions in request.topics:
        write_string(out, name)
        out += I32.pack(len(partitions))
        for partition_index, timestamp, max_num_offsets in partitions:
            out += _REQ_PARTITION.pack(partition_index, timestamp, max_num_offsets)
    return bytes(out)


def write_response(response: ListOffsetsV0Response, out: bytearray | None = None) -> bytearray:
    """Encode a v0 response body, appending to ``out`` (a new bytearray by default)."""
    if out is None:
        out = bytearray()
    out += I32.pack(len(response.topics))
    for name, partitions in response.topics:
        write_string(out, name)
        out += I32.pack(len(partitions))
        for partition_index, error_code, offsets in partitions:
            out += _RESP_PARTITION_HEAD.pack(partition_index, int(error_code))
            out += I32.pack(len(offsets))
            if offsets:
                out += struct.pack(f">{len(offsets)}q", *offsets)
    return out


def read_response(buf, offset: int = 0) -> tuple[ListOffsetsV0Response, int]:
    """Decode a v0 response body at ``offset``; returns (response, bytes consumed)."""
    r = Reader(buf, offset)
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        parts = []
        for _ in range(r.count(10)):
            partition_index, error_code = r.unpack(_RESP_PARTITION_HEAD)
            n_offsets = r.count(8)
            offsets = r.unpack(struct.Struct(f">{n_offsets}q"))
            parts.append(ListOffsetsV0ResponsePartition(partition_index, ErrorCode(error_code), offsets))
        topics.append(ListOffsetsV0ResponseTopic(name, tuple(parts)))
    return ListOffsetsV0Response(topics=tuple(topics)), r.pos - offset
