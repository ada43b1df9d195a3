"""Partition logs on local files: segments, sparse indexes, recovery, retention."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    LogError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from .log import AppendInfo, Log
from .manager import LogManager
from .segment import LogSegment

__all__ = [
    "AppendInfo",
    "CorruptRecordError",
    "InvalidProducerEpochError",
    "Log",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
]
