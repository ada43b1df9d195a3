"""What a client's Produce may append to a partition: the rules of Kafka's LogValidator, in one place.

The produce handler calls `validate_produce` for each partition before appending; nothing else
does. The group coordinator appends its own records to `__consumer_offsets` without it, and so
will a follower copying its leader's log. Failures are typed errors from `tidemark.records`
(and `InvalidTopicError`) that `broker.errors.error_code_for` maps to Kafka's codes.
"""

from __future__ import annotations

from itertools import islice

from tidemark.cluster.embedded import InvalidTopicError
from tidemark.log.config import LogConfig
from tidemark.records import legacy
from tidemark.records import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    RecordListTooLargeError,
    RecordTooLargeError,
    RecordValidationError,
    iter_batches,
    produce_records_valid,
    records_section,
    walk_records,
)


def upconvert_produce(records: bytes, *, topic: str, internal: bool) -> bytes:
    """The records of a Produce v0-v2 as one RecordBatch v2 (Kafka 3.x's up-conversion): message
    formats v0/v1 are converted, CRC by CRC; anything else (a client that sends v2 batches with
    an old request) is left for `validate_produce` to judge. The result still goes through it."""
    if internal:
        raise InvalidTopicError(f"Cannot append to internal topic {topic}")
    return legacy.to_record_batch(records) if legacy.is_legacy(records) else records


def validate_produce(records: bytes, config: LogConfig, *, topic: str, partition: int, internal: bool) -> BatchHeader:
    """Check one partition's records from a Produce request; return the header of its batch."""
    if internal:
        # Only the broker writes the offsets topic: a forged record there can stop a partition
        # from loading or shadow later commits.
        raise InvalidTopicError(f"Cannot append to internal topic {topic}")
    topic_partition = f"{topic}-{partition}"
    # Magic, length, CRC: CorruptRecordError / UnsupportedMagicError. Two batches are enough to
    # refuse, so a request of many batches is never walked (or CRC-checked) to its end.
    batches = list(islice(iter_batches(records), 2))
    if len(batches) != 1:
        # Kafka's ProduceRequest rule for v2 batches. It also means a retried batch can never
        # shadow a new one behind it in the same request.
        raise InvalidRecordError(f"Produce requests must carry exactly one record batch per partition, "
                                 f"{topic_partition} has {len(batches)}")
    (position, header), = batches
    if header.size > config.max_message_bytes:
        raise RecordTooLargeError(f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}")
    if len(records) > config.segment_bytes:
        raise RecordListTooLargeError(f"{len(records)} bytes of batches exceed segment.bytes {config.segment_bytes}")
    if header.is_control:
        raise InvalidRecordError("clients may not write control batches")
    if header.is_transactional and (header.producer_id < 0 or header.base_sequence < 0):
        # A transaction is an idempotent producer's: its markers and state hang on the id.
        raise InvalidRecordError("a transactional batch needs a producer id and a sequence")
    if header.records_count == 0 or header.records_count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"{header.records_count} records but last offset delta {header.last_offset_delta}")
    _validate_records(records, position, header, config, topic_partition)
    return header


def _validate_records(records: bytes, position: int, header: BatchHeader, config: LogConfig,
                      topic_partition: str) -> None:
    """Each record against the header (decompressed within MAX_DECOMPRESSED_BATCH_BYTES):
    exactly records_count of them, each filling exactly its declared length, the records filling
    exactly the batch, offset deltas 0..n-1 as clients write them, header keys in UTF-8, and a
    key for every record of a compacted topic (the cleaner would drop a keyless one later). A
    record that does not parse is a client's INVALID_RECORD here (Kafka's InvalidRecordException);
    bytes that do not decompress stay CORRUPT_MESSAGE. Keyless records are Kafka's per-record
    errors (KIP-467): all of them are collected, by batch index, into one RecordValidationError,
    so the producer fails exactly those and may retry the rest."""
    compacted = config.compact_enabled
    header, buf, start, end = records_section(records, position)
    if produce_records_valid(buf, start, end, header.records_count, compacted):
        return  # the compiled walk passed every record; anything else the walk below decides
    index = 0
    record_errors: list[tuple[int, str]] = []
    try:
        for index, (_, _, _, _, offset_delta, _, key_len, _, _, headers) in enumerate(
                walk_records(buf, header.records_count, start, end)):
            if offset_delta != index:
                raise InvalidRecordError(f"record {index} has offset delta {offset_delta}, expected {index}")
            if compacted and key_len < 0:
                record_errors.append((index, f"Compacted topic cannot accept message without key in topic "
                                             f"partition {topic_partition}."))
            for key_pos, key_len, _, _ in headers:  # protocol strings: clients decode them as UTF-8
                str(buf[key_pos:key_pos + key_len], "utf-8")
    except CorruptRecordError as exc:
        raise InvalidRecordError(str(exc)) from None
    except UnicodeDecodeError:
        raise InvalidRecordError(f"record {index} has a header key that is not UTF-8") from None
    if record_errors:
        raise RecordValidationError(record_errors)
