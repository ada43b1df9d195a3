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
    UnknownProducerIdError,
)
from .unified_log import AppendInfo, UnifiedLog
from .manager import LogManager
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogOfflineError",
    "LogSegment",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "UnifiedLog",
    "UnknownProducerIdError",
]
