"""Produce v3+ request bodies read by hand, each partition's records a view over the frame.

kio copies every `records` field out of the frame into a bytes object; for a produce that is a
copy of every byte produced. This reader builds kio's own entities (same classes, same field
values, tests/wire/test_produce_request.py holds it to kio for every version) with `records` a
memoryview of the frame, so the records reach the log without being copied (the broker's frame
decoder keeps a produce frame's bytes in place while any view of them lives). Layout (Kafka's
ProduceRequest.json): TransactionalId nullable string (v3+), Acks int16, TimeoutMs int32,
TopicData [Name string (v0-12) | TopicId uuid (v13+), PartitionData [Index int32, Records
nullable records]]; flexible from v9 (compact lengths, tagged fields after every struct).
"""

from __future__ import annotations

import datetime
import functools
import struct
import sys
import uuid
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema

from .api_keys import ApiKey
from .primitives import I32, Reader

FIRST_VERSION = 3
FIRST_FLEXIBLE = 9
FIRST_TOPIC_ID = 13
_HEAD = struct.Struct(">hi")  # acks, timeout


def _records(r: Reader, flexible: bool) -> memoryview | None:
    n = r.uvarint() - 1 if flexible else r.unpack(I32)[0]
    if n < 0:
        return None
    end = r.pos + n
    if end > len(r.buf):
        raise ValueError("records run past the end of the frame")
    view = r.buf[r.pos:end]
    r.pos = end
    return view


def _nullable_string(r: Reader, flexible: bool) -> str | None:
    return r._string(r.uvarint() - 1 if flexible else r.int16(), nullable=True)


@functools.cache
def reader(version: int) -> Callable[[Any, int], tuple[Any, int]]:
    """The body reader of Produce v`version` (3 on): (frame, offset) -> (kio's request entity,
    bytes read). The frame must be a memoryview for the records to be views of it."""
    request_cls = load_request_schema(ApiKey.PRODUCE, version)
    module = sys.modules[request_cls.__module__]
    topic_cls, partition_cls = module.TopicProduceData, module.PartitionProduceData
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FIRST_TOPIC_ID

    def read(frame: Any, offset: int) -> tuple[Any, int]:
        if not isinstance(frame, memoryview):
            frame = memoryview(frame)
        r = Reader(frame, offset)
        count = r.compact_count if flexible else r.count
        transactional_id = _nullable_string(r, flexible)
        acks, timeout_ms = r.unpack(_HEAD)
        topics = []
        for _ in range(count(2)):
            if by_id:
                raw = bytes(frame[r.pos:r.pos + 16])
                if len(raw) != 16:
                    raise ValueError("topic id runs past the end of the frame")
                r.pos += 16
                topic_id = uuid.UUID(bytes=raw)
                name_field = {"topic_id": None if topic_id.int == 0 else topic_id}
            else:
                name_field = {"name": r.compact_string() if flexible else r.string()}
            partitions = []
            for _ in range(count(5)):
                (index,) = r.unpack(I32)
                partitions.append(partition_cls(index=index, records=_records(r, flexible)))
                if flexible:
                    r.skip_tagged_fields()
            topics.append(topic_cls(**name_field, partition_data=tuple(partitions)))
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
        request = request_cls(transactional_id=transactional_id, acks=acks,
                              timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=tuple(topics))
        return request, r.pos - offset

    return read
