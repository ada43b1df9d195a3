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


class RecordValidationError(InvalidRecordError):
    """Records of a well-formed batch refused one by one (Kafka's RecordValidationException,
    KIP-467): `record_errors` holds (batch index, message) for each, so a producer can fail those
    records and retry the others."""

    def __init__(self, record_errors: list[tuple[int, str]]) -> None:
        self.record_errors = record_errors
        shown = ", ".join(f"RecordError(batchIndex={index}, message='{message}')"
                          for index, message in record_errors[:3])
        # Kafka's wording, which clients log as the partition's error message.
        super().__init__(f"One or more records have been rejected due to {len(record_errors)} record errors "
                         f"in total, and only showing the first three errors at most: [{shown}]")


class RecordListTooLargeError(RecordsError):
    """One request's batches exceed the segment size (Kafka's RECORD_LIST_TOO_LARGE)."""


class UnsupportedCompressionTypeError(RecordsError):
    """A codec the record format does not allow, zstd in message formats v0/v1 (Kafka's
    UNSUPPORTED_COMPRESSION_TYPE)."""
