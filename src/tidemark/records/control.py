"""Control records: the transaction markers (Kafka's EndTransactionMarker) in a control batch.

A control batch has the control bit (attributes bit 5) and the transactional bit (bit 4) set,
the transaction's producer id and epoch, base sequence -1, and one record whose key is version
int16 (0) + type int16 (0 ABORT, 1 COMMIT) and whose value is version int16 (0) + coordinator
epoch int32. Readers accept a newer value version as Kafka does (its fields come first).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .batch import build_batch, decode_records
from .errors import CorruptRecordError

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class EndTxnMarker(NamedTuple):
    committed: bool
    coordinator_epoch: int


def encode_marker_key(committed: bool) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, COMMIT if committed else ABORT)


def encode_marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                       timestamp_ms: int, *, base_offset: int = 0, partition_leader_epoch: int = 0) -> bytes:
    """One control batch holding one COMMIT or ABORT marker of the producer's transaction."""
    return build_batch([(encode_marker_key(committed), encode_marker_value(coordinator_epoch), (), timestamp_ms)],
                       base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=-1, partition_leader_epoch=partition_leader_epoch, is_transactional=True,
                       is_control=True)


def control_type(key: bytes | None) -> int:
    """The control record's type (ABORT 0, COMMIT 1; others are not markers)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError("a control record needs a 4-byte key")
    version, kind = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key version {version}")
    return kind


def decode_marker(key: bytes | None, value: bytes | None) -> EndTxnMarker | None:
    """The marker a control record carries, or None for another control type."""
    kind = control_type(key)
    if kind not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError("a transaction marker needs a 6-byte value")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"transaction marker value version {version}")
    return EndTxnMarker(kind == COMMIT, coordinator_epoch)


def read_marker(batch, position: int = 0) -> EndTxnMarker | None:
    """The marker of the control batch at `position` (None if its record is no marker)."""
    records = decode_records(batch, position)
    if len(records) != 1:
        raise CorruptRecordError(f"a control batch holds {len(records)} records, not 1")
    return decode_marker(records[0].key, records[0].value)
