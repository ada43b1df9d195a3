"""Errors raised while parsing or building record batches."""


class RecordsError(Exception):
    """Base class for record batch errors."""


class CorruptRecordError(RecordsError):
    """A batch failed a structural or CRC check (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedMagicError(CorruptRecordError):
    """A batch with a magic byte other than 2 (only RecordBatch v2 is supported)."""


class RecordTooLargeError(RecordsError):
    """A batch larger than the configured maximum (Kafka's MESSAGE_TOO_LARGE)."""
