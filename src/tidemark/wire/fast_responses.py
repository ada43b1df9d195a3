"""Hand-written encoders for the response bodies on the offset manager's hot path.

kio's writer is pure Python and walks every nested entity: building and encoding a 100-partition
OffsetCommit response with it was about a fifth of a batched commit's broker CPU, and these cost
a small fraction of that. Fetch is the other half of a replicated commit: every commit is one
fetch answer to each follower, and building and encoding them with kio was a tenth of a leader's
CPU; OffsetFetch is what lag monitors ask of every group. Each takes the
handler's response dict (Kafka field names, as `wire.build` does) and returns exactly the bytes
kio would write (Fetch: a frame of parts whose bytes are those, its records not copied);
tests/wire/test_fast_responses.py holds them to that for every version.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .codec import Request, encode_response_body
from .framing import OutboundFrame
from .api_keys import ApiKey
from .primitives import I16, I32, I64, uvarint

_PARTITION_COMMIT = struct.Struct(">ih")  # partition_index, error_code
_PARTITION_COMMIT_FLEXIBLE = struct.Struct(">ihx")  # and no tagged fields (0)
_PARTITION_FETCHED = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_PARTITION_OFFSET = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_OFFSET_EPOCH = struct.Struct(">iqi")  # partition_index, committed_offset, committed_leader_epoch
# A flexible version's partition with metadata "": partition_index, committed_offset,
# committed_leader_epoch, the empty compact string (1), error_code, no tagged fields (0).
_PARTITION_FETCHED_EMPTY = struct.Struct(">iqiBhB")
_ABORTED_TRANSACTION = struct.Struct(">qq")  # producer_id, first_offset
_ZERO_UUID = uuid.UUID(int=0)  # kio reads it as None
_SIZE_AND_ID = struct.Struct(">ii")
_HEADER_SPACE = {False: bytes(8), True: bytes(9)}  # response header v0 / v1 (its empty tagged fields)
# Records at least this large go to the transport as their own buffer; smaller ones are copied
# into the frame's head (one write of a few KiB costs less than another write call).
SEPARATE_RECORDS_BYTES = 16 * 1024



class Writer:
    """Kafka's primitive encodings, flexible (compact, tagged) or not."""

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.out = bytearray()

    def array_length(self, n: int | None) -> None:
        if self.flexible:
            self.out += uvarint(0 if n is None else n + 1)
        else:
            self.out += I32.pack(-1 if n is None else n)

    def string(self, text: str | None) -> None:
        if text is None:
            self.out += b"\x00" if self.flexible else I16.pack(-1)
            return
        raw = text.encode()
        self.out += uvarint(len(raw) + 1) if self.flexible else I16.pack(len(raw))
        self.out += raw

    def tagged_fields(self) -> None:
        if self.flexible:
            self.out.append(0)

    def nullable_bytes(self, data: bytes | None) -> None:
        if data is None:
            self.out += b"\x00" if self.flexible else I32.pack(-1)
            return
        self.out += uvarint(len(data) + 1) if self.flexible else I32.pack(len(data))
        self.out += data


def encode_offset_commit_response(version: int, response: dict[str, Any]) -> bytes:
    w = Writer(flexible=version >= 8)
    if version >= 3:
        w.out += I32.pack(response.get("throttle_time", 0))
    topics = response["topics"]
    w.array_length(len(topics))
    for topic in topics:
        if version >= 10:
            w.out += (topic["topic_id"] or _ZERO_UUID).bytes
        else:
            w.string(topic["name"])
        partitions = topic["partitions"]
        w.array_length(len(partitions))
        out, pack = w.out, (_PARTITION_COMMIT_FLEXIBLE if w.flexible else _PARTITION_COMMIT).pack
        for p in partitions:
            out += pack(p["partition_index"], p["error_code"])
        w.tagged_fields()
    w.tagged_fields()
    return bytes(w.out)


def _offset_fetch_topics(w: Writer, version: int, topics: list[dict[str, Any]]) -> None:
    out = w.out
    w.array_length(len(topics))
    flexible = version >= 6  # and so with leader epochs
    pack_empty = _PARTITION_FETCHED_EMPTY.pack
    for topic in topics:
        if version >= 10:
            out += (topic["topic_id"] or _ZERO_UUID).bytes
        else:
            w.string(topic["name"])
        partitions = topic["partitions"]
        w.array_length(len(partitions))
        for p in partitions:
            if flexible and p["metadata"] == "":  # what nearly every partition is: one pack
                out += pack_empty(p["partition_index"], p["committed_offset"], p.get("committed_leader_epoch", -1), 1,
                                  p["error_code"], 0)
                continue
            if version >= 5:
                out += _PARTITION_OFFSET_EPOCH.pack(p["partition_index"], p["committed_offset"],
                                                    p.get("committed_leader_epoch", -1))
            else:
                out += _PARTITION_OFFSET.pack(p["partition_index"], p["committed_offset"])
            w.string(p["metadata"])
            out += I16.pack(p["error_code"])
            w.tagged_fields()
        w.tagged_fields()


def encode_offset_fetch_response(version: int, response: dict[str, Any]) -> bytes:
    """OffsetFetch v1-v10: one group's topics (v1-v7, with its error code from v2), or several
    groups (v8 on); v10 names topics by id."""
    w = Writer(flexible=version >= 6)
    if version >= 3:
        w.out += I32.pack(response.get("throttle_time", 0))
    if version >= 8:
        groups = response["groups"]
        w.array_length(len(groups))
        for group in groups:
            w.string(group["group_id"])
            _offset_fetch_topics(w, version, group["topics"])
            w.out += I16.pack(group.get("error_code", 0))
            w.tagged_fields()
    else:
        _offset_fetch_topics(w, version, response["topics"])
        if version >= 2:
            w.out += I16.pack(response["error_code"])
    w.tagged_fields()
    return bytes(w.out)


def encode_fetch_response(version: int, response: dict[str, Any]) -> bytes:
    """The Fetch handler's answers (v4 on) as one body (tests and tools; the broker writes
    `fetch_response_frame`'s parts)."""
    frame = fetch_response_frame(Request(ApiKey.FETCH, version, 0, None, None, False), response)
    return bytes(frame)[9 if version >= 12 else 8:]


def fetch_response_frame(request: Request, response: dict[str, Any]) -> OutboundFrame:
    """The whole Fetch response frame (v4 on) as buffers to write one after another: each
    partition's records of SEPARATE_RECORDS_BYTES or more is its own part, the very object the
    log's read returned, so record bytes are never copied on the way to the socket. No partition
    carries the tagged fields (diverging_epoch, current_leader, snapshot_id), nor the response
    node_endpoints."""
    version = request.api_version
    flexible = version >= 12
    w = Writer(flexible)
    parts: list[Any] = []
    out = w.out
    out += _HEADER_SPACE[flexible]  # size and correlation id, filled in at the end
    out += I32.pack(response.get("throttle_time", 0))
    if version >= 7:
        out += I16.pack(response["error_code"])
        out += I32.pack(response["session_id"])
    topics = response["responses"]
    w.array_length(len(topics))
    for topic in topics:
        if version >= 13:
            out += (topic["topic_id"] or _ZERO_UUID).bytes
        else:
            w.string(topic["topic"])
        partitions = topic["partitions"]
        w.array_length(len(partitions))
        for p in partitions:
            out += _PARTITION_FETCHED.pack(p["partition_index"], p["error_code"], p["high_watermark"],
                                           p["last_stable_offset"])
            if version >= 5:
                out += I64.pack(p["log_start_offset"])
            aborted = p["aborted_transactions"]
            w.array_length(None if aborted is None else len(aborted))
            for transaction in aborted or ():
                out += _ABORTED_TRANSACTION.pack(transaction["producer_id"], transaction["first_offset"])
                w.tagged_fields()
            if version >= 11:
                out += I32.pack(p["preferred_read_replica"])
            records = p["records"]
            if records is not None and len(records) >= SEPARATE_RECORDS_BYTES:
                out += uvarint(len(records) + 1) if flexible else I32.pack(len(records))
                parts.append(out)
                parts.append(records)
                out = w.out = bytearray()
            else:
                w.nullable_bytes(records)
            w.tagged_fields()
        w.tagged_fields()
    w.tagged_fields()
    parts.append(out)
    size = sum(len(part) for part in parts)
    _SIZE_AND_ID.pack_into(parts[0], 0, size - 4, request.correlation_id)
    return OutboundFrame(parts, size)


# api key -> (versions it encodes, first flexible version, body encoder); Fetch's frames come
# from fetch_response_frame.
FAST_ENCODERS: dict[int, tuple[range, int, Callable[[int, dict[str, Any]], bytes]]] = {
    ApiKey.OFFSET_COMMIT: (range(2, 11), 8, encode_offset_commit_response),
    ApiKey.FETCH: (range(4, 19), 12, encode_fetch_response),
    ApiKey.OFFSET_FETCH: (range(1, 11), 6, encode_offset_fetch_response),
}


def encode_fast(request: Request, response: dict[str, Any]) -> bytes | OutboundFrame | None:
    """The whole response frame when a hand-written encoder covers this API and version."""
    entry = FAST_ENCODERS.get(request.api_key)
    if entry is None or request.api_version not in entry[0]:
        return None
    if request.api_key == ApiKey.FETCH:
        return fetch_response_frame(request, response)
    _, first_flexible, encode = entry
    return encode_response_body(request, encode(request.api_version, response),
                                flexible_header=request.api_version >= first_flexible)
