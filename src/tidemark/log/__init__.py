"""Partition logs on local files: segments, sparse indexes, recovery, retention."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    LogError,
    LogOfflineError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    UnknownProducerIdError,
)
from .leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochFileCache
from .unified_log import AppendInfo, AppendOrigin, UnifiedLog
from .manager import LogManager
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "AppendOrigin",
    "CorruptRecordError",
    "EpochEntry",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "LeaderEpochFileCache",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogOfflineError",
    "LogSegment",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "UnexpectedAppendOffsetError",
    "UnifiedLog",
    "UnknownProducerIdError",
]
