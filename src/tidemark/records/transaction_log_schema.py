"""Keys and values of the records in `__transaction_state`, byte-compatible with Kafka.

Key: int16 version (0, which Kafka also names the coordinator record type) + transactional id
(int16-length string). Value: int16 version, then producer_id int64, producer_epoch int16,
transaction_timeout_ms int32, transaction_status int8, transaction_partitions (nullable array of
[topic string, partition_ids [int32]]), transaction_last_update_timestamp_ms int64,
transaction_start_timestamp_ms int64. Version 1 is the same fields flexible (compact lengths, a
tagged-field section after each struct; tags 0 PreviousProducerId, 1 NextProducerId, 2
ClientTransactionVersion). Kafka writes version 0 until transaction.version 2 is enabled, and so
does tidemark; both versions are read. A record with a null value (a tombstone) deletes an
expired transactional id.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from tidemark.wire.primitives import read_uvarint, skip_tagged_fields, uvarint

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "TRANSACTION_LOG_KEY_VERSION",
    "TRANSACTION_LOG_VALUE_VERSION",
    "TransactionLogValue",
    "TransactionStatus",
    "decode_transaction_key",
    "decode_transaction_value",
    "encode_transaction_key",
    "encode_transaction_value",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 0
_FLEXIBLE_VERSION = 1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_HEAD_FLEX = struct.Struct(">qhib")
_TIMES = struct.Struct(">qq")


class TransactionStatus(enum.IntEnum):
    """Kafka's TransactionState ids (the int8 on disk) and names (what DescribeTransactions and
    ListTransactions show)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionStatus | None:
        return next((status for status in cls if status.kafka_name == name), None)


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    status: TransactionStatus
    # topic -> partition ids, in the order written; None is Kafka's null (an Empty transaction)
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def encode_transaction_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(TRANSACTION_LOG_KEY_VERSION) + _I16.pack(len(data)) + data


def decode_transaction_key(data: bytes) -> str | None:
    """The transactional id of a key, or None for a key of another record type (skipped, as
    Kafka's loader skips them)."""
    (version,) = _I16.unpack_from(data, 0)
    if version != TRANSACTION_LOG_KEY_VERSION:
        return None
    (length,) = _I16.unpack_from(data, 2)
    if length < 0 or 4 + length > len(data):
        raise ValueError("transaction log key: bad transactional id length")
    return data[4:4 + length].decode()


def encode_transaction_value(value: TransactionLogValue, *, version: int = TRANSACTION_LOG_VALUE_VERSION) -> bytes:
    if version == 0:
        out = bytearray(_HEAD.pack(0, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                                   int(value.status)))
        if value.partitions is None:
            out += _I32.pack(-1)
        else:
            out += _I32.pack(len(value.partitions))
            for topic, ids in value.partitions:
                name = topic.encode()
                out += _I16.pack(len(name)) + name + _I32.pack(len(ids))
                out += b"".join(_I32.pack(p) for p in ids)
        out += _TIMES.pack(value.last_update_timestamp_ms, value.start_timestamp_ms)
        return bytes(out)
    if version == _FLEXIBLE_VERSION:
        out = bytearray(_I16.pack(1))
        out += _HEAD_FLEX.pack(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                               int(value.status))
        if value.partitions is None:
            out += uvarint(0)
        else:
            out += uvarint(len(value.partitions) + 1)
            for topic, ids in value.partitions:
                name = topic.encode()
                out += uvarint(len(name) + 1) + name + uvarint(len(ids) + 1)
                out += b"".join(_I32.pack(p) for p in ids)
                out += uvarint(0)  # the struct's tagged fields: none
        out += _TIMES.pack(value.last_update_timestamp_ms, value.start_timestamp_ms)
        out += uvarint(0)
        return bytes(out)
    raise ValueError(f"transaction log value version {version} is not supported")


def decode_transaction_value(data: bytes) -> TransactionLogValue:
    (version,) = _I16.unpack_from(data, 0)
    if version == 0:
        _, producer_id, epoch, timeout, status = _HEAD.unpack_from(data, 0)
        pos = _HEAD.size
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        partitions: list[tuple[str, tuple[int, ...]]] | None = None if count < 0 else []
        for _ in range(max(count, 0)):
            (length,) = _I16.unpack_from(data, pos)
            topic = data[pos + 2:pos + 2 + length].decode()
            pos += 2 + length
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            ids = struct.unpack_from(f">{n}i", data, pos)
            pos += 4 * n
            partitions.append((topic, tuple(ids)))
        last_update, start = _TIMES.unpack_from(data, pos)
    elif version == _FLEXIBLE_VERSION:
        producer_id, epoch, timeout, status = _HEAD_FLEX.unpack_from(data, 2)
        pos = 2 + _HEAD_FLEX.size
        count, pos = read_uvarint(data, pos)
        partitions = None if count == 0 else []
        for _ in range(max(count - 1, 0)):
            length, pos = read_uvarint(data, pos)
            topic = data[pos:pos + length - 1].decode()
            pos += length - 1
            n, pos = read_uvarint(data, pos)
            ids = struct.unpack_from(f">{n - 1}i", data, pos)
            pos += 4 * (n - 1)
            pos = skip_tagged_fields(data, pos)
            partitions.append((topic, tuple(ids)))
        last_update, start = _TIMES.unpack_from(data, pos)
        # the top-level tagged fields (previous/next producer id, client transaction version)
        # are not used under transaction.version < 2
    else:
        raise ValueError(f"unknown transaction log value version {version}")
    return TransactionLogValue(producer_id, epoch, timeout, TransactionStatus(status),
                               None if partitions is None else tuple(partitions), last_update, start)
