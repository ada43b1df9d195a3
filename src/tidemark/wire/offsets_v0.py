"""OffsetCommit v0-v1 and OffsetFetch v0, which kio does not cover (it starts at v2 and v1).

Kafka 0.8.1 and 0.8.2 clients commit with these; Kafka served OffsetCommit v0 and OffsetFetch v0
from ZooKeeper and v1 from the offsets topic. Layouts from Kafka's OffsetCommitRequest.json /
OffsetCommitResponse.json / OffsetFetchRequest.json / OffsetFetchResponse.json at those versions,
non-flexible (int16-length strings, int32-count arrays; request header v1, response header v0):

    OffsetCommit v0 request:  GroupId string,
                              Topics [Name string, Partitions [PartitionIndex int32,
                                      CommittedOffset int64, CommittedMetadata nullable string]]
    OffsetCommit v1 request:  GroupId string, GenerationIdOrMemberEpoch int32, MemberId string,
                              Topics [Name string, Partitions [PartitionIndex int32,
                                      CommittedOffset int64, CommitTimestamp int64,
                                      CommittedMetadata nullable string]]
    OffsetCommit v0-1 response: Topics [Name string, Partitions [PartitionIndex int32, ErrorCode int16]]
    OffsetFetch v0 request:   GroupId string, Topics [Name string, PartitionIndexes [int32]]
    OffsetFetch v0 response:  Topics [Name string, Partitions [PartitionIndex int32,
                                      CommittedOffset int64, Metadata nullable string, ErrorCode int16]]

The entities carry kio's field names, so handlers and `build()` treat them like kio's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from .api_keys import ApiKey
from .primitives import I16, I32, I64, Reader, write_string


_ERROR_CODE = {"kafka_type": "error_code"}


# --------------------------------------------------------------------------- entities


@dataclass(frozen=True, slots=True)
class OffsetCommitV0Partition:
    partition_index: int
    committed_offset: int
    committed_metadata: str | None
    commit_timestamp: int = -1  # v1 only


@dataclass(frozen=True, slots=True)
class OffsetCommitV0Topic:
    name: str
    partitions: tuple[OffsetCommitV0Partition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitV0Request:
    __api_key__: ClassVar[int] = ApiKey.OFFSET_COMMIT
    group_id: str
    topics: tuple[OffsetCommitV0Topic, ...]
    # v0 has no group membership: it commits as a standalone consumer would.
    generation_id_or_member_epoch: int = -1
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitV0ResponsePartition:
    partition_index: int
    error_code: ErrorCode = dataclasses.field(metadata=_ERROR_CODE)


@dataclass(frozen=True, slots=True)
class OffsetCommitV0ResponseTopic:
    name: str
    partitions: tuple[OffsetCommitV0ResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitV0Response:
    """The response of OffsetCommit v0 and v1 (one layout; `version` says which answers which)."""

    __api_key__: ClassVar[int] = ApiKey.OFFSET_COMMIT
    topics: tuple[OffsetCommitV0ResponseTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitV1Response(OffsetCommitV0Response):
    pass


OffsetCommitV0Response.__version__ = 0  # type: ignore[attr-defined]
OffsetCommitV1Response.__version__ = 1  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class OffsetFetchV0Topic:
    name: str
    partition_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchV0Request:
    __api_key__: ClassVar[int] = ApiKey.OFFSET_FETCH
    __version__: ClassVar[int] = 0
    group_id: str
    topics: tuple[OffsetFetchV0Topic, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchV0ResponsePartition:
    partition_index: int
    committed_offset: int
    metadata: str | None
    error_code: ErrorCode = dataclasses.field(metadata=_ERROR_CODE)


@dataclass(frozen=True, slots=True)
class OffsetFetchV0ResponseTopic:
    name: str
    partitions: tuple[OffsetFetchV0ResponsePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchV0Response:
    __api_key__: ClassVar[int] = ApiKey.OFFSET_FETCH
    __version__: ClassVar[int] = 0
    topics: tuple[OffsetFetchV0ResponseTopic, ...]


RESPONSE_CLASSES: dict[tuple[int, int], type] = {
    (ApiKey.OFFSET_COMMIT, 0): OffsetCommitV0Response,
    (ApiKey.OFFSET_COMMIT, 1): OffsetCommitV1Response,
    (ApiKey.OFFSET_FETCH, 0): OffsetFetchV0Response,
}


# --------------------------------------------------------------------------- primitives


# --------------------------------------------------------------------------- OffsetCommit v0-1


def read_offset_commit(version: int) -> Any:
    """The body reader of OffsetCommit `version` (0 or 1): (buf, offset) -> (request, size)."""

    def read(buf: Any, offset: int = 0) -> tuple[OffsetCommitV0Request, int]:
        r = Reader(buf, offset)
        group_id = r.string()
        generation, member_id = (r.int32(), r.string()) if version >= 1 else (-1, "")
        topics = []
        for _ in range(r.count(6)):
            name = r.string()
            partitions = []
            for _ in range(r.count(14)):
                index, committed = r.int32(), r.int64()
                timestamp = r.int64() if version >= 1 else -1
                partitions.append(OffsetCommitV0Partition(index, committed, r.string(nullable=True), timestamp))
            topics.append(OffsetCommitV0Topic(name, tuple(partitions)))
        request = OffsetCommitV0Request(group_id=group_id, topics=tuple(topics),
                                        generation_id_or_member_epoch=generation, member_id=member_id)
        return request, r.pos - offset

    return read


def write_offset_commit(request: OffsetCommitV0Request, version: int) -> bytes:
    """Encode an OffsetCommit v0/v1 request body (tests and client-side tools)."""
    out = bytearray()
    write_string(out, request.group_id)
    if version >= 1:
        out += I32.pack(request.generation_id_or_member_epoch)
        write_string(out, request.member_id)
    out += I32.pack(len(request.topics))
    for topic in request.topics:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partitions))
        for p in topic.partitions:
            out += I32.pack(p.partition_index) + I64.pack(p.committed_offset)
            if version >= 1:
                out += I64.pack(p.commit_timestamp)
            write_string(out, p.committed_metadata)
    return bytes(out)


def write_offset_commit_response(response: OffsetCommitV0Response) -> bytes:
    out = bytearray(I32.pack(len(response.topics)))
    for topic in response.topics:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partitions))
        for p in topic.partitions:
            out += I32.pack(p.partition_index) + I16.pack(int(p.error_code))
    return bytes(out)


def read_offset_commit_response(buf: Any, offset: int = 0) -> tuple[OffsetCommitV0Response, int]:
    r = Reader(buf, offset)
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        partitions = []
        for _ in range(r.count(6)):
            index = r.int32()
            partitions.append(OffsetCommitV0ResponsePartition(index, ErrorCode(r.int16())))
        topics.append(OffsetCommitV0ResponseTopic(name, tuple(partitions)))
    return OffsetCommitV0Response(topics=tuple(topics)), r.pos - offset


# --------------------------------------------------------------------------- OffsetFetch v0


def read_offset_fetch(buf: Any, offset: int = 0) -> tuple[OffsetFetchV0Request, int]:
    r = Reader(buf, offset)
    group_id = r.string()
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        topics.append(OffsetFetchV0Topic(name, tuple(r.int32() for _ in range(r.count(4)))))
    return OffsetFetchV0Request(group_id=group_id, topics=tuple(topics)), r.pos - offset


def write_offset_fetch(request: OffsetFetchV0Request) -> bytes:
    out = bytearray()
    write_string(out, request.group_id)
    out += I32.pack(len(request.topics))
    for topic in request.topics:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partition_indexes))
        for index in topic.partition_indexes:
            out += I32.pack(index)
    return bytes(out)


def write_offset_fetch_response(response: OffsetFetchV0Response) -> bytes:
    out = bytearray(I32.pack(len(response.topics)))
    for topic in response.topics:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partitions))
        for p in topic.partitions:
            out += I32.pack(p.partition_index) + I64.pack(p.committed_offset)
            write_string(out, p.metadata)
            out += I16.pack(int(p.error_code))
    return bytes(out)


def read_offset_fetch_response(buf: Any, offset: int = 0) -> tuple[OffsetFetchV0Response, int]:
    r = Reader(buf, offset)
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        partitions = []
        for _ in range(r.count(16)):
            index, committed = r.int32(), r.int64()
            metadata = r.string(nullable=True)
            partitions.append(OffsetFetchV0ResponsePartition(index, committed, metadata, ErrorCode(r.int16())))
        topics.append(OffsetFetchV0ResponseTopic(name, tuple(partitions)))
    return OffsetFetchV0Response(topics=tuple(topics)), r.pos - offset


# The codec's table: (api key, version) -> (body reader, response class, response writer).
CODECS: dict[tuple[int, int], tuple[Any, type, Any]] = {
    (ApiKey.OFFSET_COMMIT, 0): (read_offset_commit(0), OffsetCommitV0Response, write_offset_commit_response),
    (ApiKey.OFFSET_COMMIT, 1): (read_offset_commit(1), OffsetCommitV1Response, write_offset_commit_response),
    (ApiKey.OFFSET_FETCH, 0): (read_offset_fetch, OffsetFetchV0Response, write_offset_fetch_response),
}
