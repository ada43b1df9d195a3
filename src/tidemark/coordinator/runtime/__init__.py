"""The coordinator runtime: one shard per partition of a coordinator's topic, each on its own
event queue, its state changed only by replaying its log (runtime.py), reaching the log and
time through interfaces (io.py)."""

from tidemark.coordinator.runtime.io import Cancellable, Clock, CoordinatorTopic, LogRecord, PartitionWriter, \
    SystemClock
from tidemark.coordinator.runtime.runtime import CoordinatorRuntime, CoordinatorShard, LoadState, \
    ShardNotAvailable, ShardRuntime

__all__ = ["Cancellable", "Clock", "CoordinatorRuntime", "CoordinatorShard", "CoordinatorTopic", "LoadState",
           "LogRecord", "PartitionWriter", "ShardNotAvailable", "ShardRuntime", "SystemClock"]
