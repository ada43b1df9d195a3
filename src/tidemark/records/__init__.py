"""RecordBatch v2 (magic 2): parsing, validation, building, compression."""

from .batch import (
    BATCH_OVERHEAD,
    BatchHeader,
    NewRecord,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    iter_key_values,
    read_header,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    valid_prefix_length,
    validate_batch,
)
from .compression import CompressionType, compress, decompress
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordListTooLargeError,
    RecordsError,
    RecordTooLargeError,
    UnsupportedMagicError,
)

__all__ = [
    "BATCH_OVERHEAD",
    "BatchHeader",
    "CompressionType",
    "CorruptRecordError",
    "InvalidRecordError",
    "RecordListTooLargeError",
    "NewRecord",
    "Record",
    "RecordTooLargeError",
    "RecordsError",
    "UnsupportedMagicError",
    "build_batch",
    "compress",
    "decode_records",
    "decompress",
    "iter_batches",
    "iter_key_values",
    "read_header",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "valid_prefix_length",
    "validate_batch",
]
