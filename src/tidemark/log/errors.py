"""Errors of the partition log. Record-level errors come from the records layer as-is."""

from tidemark.records.errors import CorruptRecordError, RecordTooLargeError

__all__ = [
    "CorruptRecordError",
    "CorruptSegmentError",
    "DataDirLockedError",
    "LogOfflineError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "LogError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "UnexpectedAppendOffsetError",
    "UnknownProducerIdError",
]


class LogError(Exception):
    """Base class for partition log errors."""


class OffsetOutOfRangeError(LogError):
    """A read below the log start offset or past the log end offset."""


class UnexpectedAppendOffsetError(LogError):
    """A follower append whose batches do not continue the log: a batch starts below the log
    end offset or below the end of the batch before it (Kafka's UnexpectedAppendOffsetException)."""


class InvalidProducerEpochError(LogError):
    """An idempotent producer wrote with an epoch older than the one the log knows."""


class OutOfOrderSequenceError(LogError):
    """An idempotent producer's batch does not follow its last sequence number."""


class UnknownProducerIdError(LogError):
    """An idempotent batch names a producer id the cluster never issued (Kafka's
    UNKNOWN_PRODUCER_ID: the broker has no metadata for it; the client gets a new id)."""


class InvalidProducerIdMappingError(LogError):
    """A transactional batch names a producer id no transactional id was ever given."""


class LogOfflineError(LogError, OSError):
    """A write or fsync of this log failed; it takes no more writes until restart recovers it.

    After a failed fsync the kernel may have dropped the dirty pages while a later fsync
    reports success, so carrying on could acknowledge records that are gone (Kafka takes the
    whole log directory offline for the same reason)."""


class DataDirLockedError(LogError):
    """Another process holds the data directory's lock (another broker runs on it)."""


class CorruptSegmentError(LogOfflineError):
    """A segment that was flushed (below the recovery point, or written before a clean
    shutdown) cannot be walked. Recovery only ever cuts the unflushed tail, so this partition
    goes offline instead, its files left as they are for an operator to look at."""


class InvalidTxnStateError(LogError):
    """A producer with an ongoing transaction on this partition wrote a non-transactional
    batch (Kafka's InvalidTxnStateException)."""


class TransactionCoordinatorFencedError(LogError):
    """A transaction marker from a coordinator epoch older than one this partition has seen."""
