"""Errors raised while parsing or building record batches."""


class RecordsError(Exception):
    """Base class for record batch errors."""


class CorruptRecordError(RecordsError):
    """A batch failed a structural or CRC check (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedMagicError(CorruptRecordError):
    """A batch with a magic byte other than 2 (only RecordBatch v2 is supported)."""


class RecordTooLargeError(RecordsError):
    """A batch larger than the configured maximum (Kafka's MESSAGE_TOO_LARGE)."""


class InvalidRecordError(RecordsError):
    """A well-formed batch a client may not write (Kafka's INVALID_RECORD): no records, a
    record count that disagrees with the offset delta, or a control batch."""


class DecompressionLimitError(InvalidRecordError):
    """A compressed batch whose records would decompress past the limit (a decompression bomb)."""


class RecordListTooLargeError(RecordsError):
    """One request's batches exceed the segment size (Kafka's RECORD_LIST_TOO_LARGE)."""
