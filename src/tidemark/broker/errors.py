"""One place that maps internal failures to the Kafka error code a client should see."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tidemark.cluster.embedded import InvalidTopicError
from tidemark.log import errors as log_errors
from tidemark.records import errors as records_errors
from tidemark.replication.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    PartitionDeletedError,
)

__all__ = ["NotEnoughReplicasAfterAppendError", "NotEnoughReplicasError", "NotLeaderOrFollowerError",
           "PartitionDeletedError", "error_code_for"]


_MAPPING: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (records_errors.UnsupportedMagicError, ErrorCode.unsupported_for_message_format),
    (records_errors.RecordTooLargeError, ErrorCode.message_too_large),
    (records_errors.UnsupportedCompressionTypeError, ErrorCode.unsupported_compression_type),
    (records_errors.RecordListTooLargeError, ErrorCode.record_list_too_large),
    (records_errors.InvalidRecordError, ErrorCode.invalid_record),
    (records_errors.CorruptRecordError, ErrorCode.corrupt_message),
    (InvalidTopicError, ErrorCode.invalid_topic_exception),
    (log_errors.OffsetOutOfRangeError, ErrorCode.offset_out_of_range),
    (log_errors.InvalidProducerEpochError, ErrorCode.invalid_producer_epoch),
    (log_errors.OutOfOrderSequenceError, ErrorCode.out_of_order_sequence_number),
    (log_errors.UnknownProducerIdError, ErrorCode.unknown_producer_id),
    (log_errors.InvalidProducerIdMappingError, ErrorCode.invalid_producer_id_mapping),
    (log_errors.InvalidTxnStateError, ErrorCode.invalid_txn_state),
    (log_errors.TransactionCoordinatorFencedError, ErrorCode.transaction_coordinator_fenced),
    (OSError, ErrorCode.kafka_storage_error),
    (PartitionDeletedError, ErrorCode.unknown_topic_or_partition),
    (NotLeaderOrFollowerError, ErrorCode.not_leader_or_follower),
    (NotEnoughReplicasError, ErrorCode.not_enough_replicas),
    (NotEnoughReplicasAfterAppendError, ErrorCode.not_enough_replicas_after_append),
    (TimeoutError, ErrorCode.request_timed_out),
)


def error_code_for(exc: BaseException) -> ErrorCode:
    for exc_type, code in _MAPPING:
        if isinstance(exc, exc_type):
            return code
    return ErrorCode.unknown_server_error
