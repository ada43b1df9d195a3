"""Produce v0-v2, which kio does not cover (it starts at v3).

Kafka 3.x still serves them (Kafka 4.0 dropped them, KIP-896); librdkafka sends v0 and v1 when
told the broker is 0.8 or 0.9 (`broker.version.fallback`), and their records come in the
message formats v0/v1 (`records.legacy` converts them). Layouts from Kafka's
ProduceRequest.json / ProduceResponse.json at those versions, non-flexible (int16-length
strings, int32-count arrays, int32-length nullable bytes; request header v1, response header v0):

    request v0-2:   Acks int16, TimeoutMs int32,
                    TopicData [Name string, PartitionData [Index int32, Records nullable bytes]]
    response v0:    Responses [Name string, PartitionResponses [Index int32, ErrorCode int16,
                                                                BaseOffset int64]]
    response v1:    v0, then ThrottleTimeMs int32
    response v2:    v1 with LogAppendTimeMs int64 after BaseOffset

The entities carry kio's field names, so the produce handler and `build()` treat them like kio's.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
from dataclasses import dataclass
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from .api_keys import ApiKey
from .primitives import I16, I32, I64, Reader, write_string

VERSIONS = (0, 1, 2)

_HEAD = struct.Struct(">hi")  # acks, timeout
_ERROR_CODE = {"kafka_type": "error_code"}


@dataclass(frozen=True, slots=True)
class ProduceV0PartitionData:
    index: int
    records: bytes | None


@dataclass(frozen=True, slots=True)
class ProduceV0TopicData:
    name: str
    partition_data: tuple[ProduceV0PartitionData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceV0Request:
    __api_key__: ClassVar[int] = ApiKey.PRODUCE
    acks: int
    timeout: datetime.timedelta
    topic_data: tuple[ProduceV0TopicData, ...]
    transactional_id: str | None = None  # v3+: never set here


@dataclass(frozen=True, slots=True)
class ProduceV0PartitionResponse:
    index: int
    error_code: ErrorCode = dataclasses.field(metadata=_ERROR_CODE)
    base_offset: int = -1
    log_append_time: int = -1  # v2 only


@dataclass(frozen=True, slots=True)
class ProduceV0TopicResponse:
    name: str
    partition_responses: tuple[ProduceV0PartitionResponse, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceV0Response:
    """The response of Produce v0 to v2 (the subclasses say which version answers)."""

    __api_key__: ClassVar[int] = ApiKey.PRODUCE
    responses: tuple[ProduceV0TopicResponse, ...]
    throttle_time: int = 0  # v1+


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceV1Response(ProduceV0Response):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceV2Response(ProduceV0Response):
    pass


ProduceV0Response.__version__ = 0  # type: ignore[attr-defined]
ProduceV1Response.__version__ = 1  # type: ignore[attr-defined]
ProduceV2Response.__version__ = 2  # type: ignore[attr-defined]


def read_request(buf: Any, offset: int = 0) -> tuple[ProduceV0Request, int]:
    """A Produce v0-v2 request body (one layout for the three)."""
    r = Reader(buf, offset)
    acks, timeout_ms = r.unpack(_HEAD)
    topics = []
    for _ in range(r.count(6)):
        name = r.string()
        partitions = []
        for _ in range(r.count(8)):
            (index,) = r.unpack(I32)
            partitions.append(ProduceV0PartitionData(index, r.nullable_bytes()))
        topics.append(ProduceV0TopicData(name, tuple(partitions)))
    request = ProduceV0Request(acks=acks, timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=tuple(topics))
    return request, r.pos - offset


def write_request(request: ProduceV0Request) -> bytes:
    """Encode a Produce v0-v2 request body (tests and client-side tools)."""
    out = bytearray(_HEAD.pack(request.acks, int(request.timeout.total_seconds() * 1000)))
    out += I32.pack(len(request.topic_data))
    for topic in request.topic_data:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partition_data))
        for p in topic.partition_data:
            out += I32.pack(p.index)
            if p.records is None:
                out += I32.pack(-1)
            else:
                out += I32.pack(len(p.records)) + p.records
    return bytes(out)


def write_response(response: ProduceV0Response) -> bytes:
    version = type(response).__version__  # type: ignore[attr-defined]
    out = bytearray(I32.pack(len(response.responses)))
    for topic in response.responses:
        write_string(out, topic.name)
        out += I32.pack(len(topic.partition_responses))
        for p in topic.partition_responses:
            out += I32.pack(p.index) + I16.pack(int(p.error_code)) + I64.pack(p.base_offset)
            if version >= 2:
                out += I64.pack(p.log_append_time)
    if version >= 1:
        out += I32.pack(response.throttle_time)
    return bytes(out)


def read_response(version: int) -> Any:
    """The body reader of a Produce v`version` response: (buf, offset) -> (response, size)."""
    cls = RESPONSE_CLASSES[version]

    def read(buf: Any, offset: int = 0) -> tuple[ProduceV0Response, int]:
        r = Reader(buf, offset)
        topics = []
        for _ in range(r.count(6)):
            name = r.string()
            partitions = []
            for _ in range(r.count(14)):
                index, code, base_offset = r.unpack(struct.Struct(">ihq"))
                append_time = r.unpack(I64)[0] if version >= 2 else -1
                partitions.append(ProduceV0PartitionResponse(index, ErrorCode(code), base_offset, append_time))
            topics.append(ProduceV0TopicResponse(name, tuple(partitions)))
        throttle = r.unpack(I32)[0] if version >= 1 else 0
        return cls(responses=tuple(topics), throttle_time=throttle), r.pos - offset

    return read


RESPONSE_CLASSES: dict[int, type[ProduceV0Response]] = {0: ProduceV0Response, 1: ProduceV1Response, 2: ProduceV2Response}

CODECS: dict[tuple[int, int], tuple[Any, type, Any]] = {
    (ApiKey.PRODUCE, version): (read_request, RESPONSE_CLASSES[version], write_response) for version in VERSIONS
}
"""(api key, version) -> (request body reader, response class, response body writer), as offsets_v0.CODECS."""
