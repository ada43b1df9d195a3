"""The coordinator runtime's PartitionWriter and topic over this broker's partitions.

The interfaces (`PartitionWriter`, `Clock`, `CoordinatorTopic`) are the runtime's own
(coordinator/runtime/io.py); the implementations here wrap the broker's `Partition` (through the
`PartitionManager`, which owns appends and flushing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.errors import NotEnoughReplicasError, NotLeaderOrFollowerError, error_code_for
from tidemark.coordinator.result import OffsetsRecord
from tidemark.coordinator.runtime.io import LogRecord, PartitionWriter
from tidemark.records import build_key_value_batch, collect_latest, iter_batches, key_values
from tidemark.coordinator.txn_offsets import TxnMarkerKey, TxnRecordKey
from tidemark.log.unified_log import AppendOrigin
from tidemark.records.compression import CompressionType
from tidemark.records.control import read_marker
from tidemark.records.offsets_schema import OFFSETS_TOPIC

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.replication.partition import Partition
    from tidemark.replication.partition_manager import PartitionManager



class LogPartitionWriter:
    """A PartitionWriter over one of this broker's partitions.

    Each append is tied to the leader epoch it was made under (as a produce's acks=-1 wait is):
    if that leadership ends before the high watermark passes it, the replay's current (or next)
    wait fails with NotLeaderOrFollowerError, so the shard answers its pending writes that way
    instead of taking a later leader's high watermark as their commit."""

    def __init__(self, config: BrokerConfig, replicas: PartitionManager, partition: Partition,
                 compression: CompressionType, load_buffer_size: int) -> None:
        self.config = config
        self.replicas = replicas
        self.partition = partition
        self.compression = compression
        self.load_buffer_size = load_buffer_size
        self._waiting: asyncio.Future[None] | None = None  # the replay's current wait
        self._lost: BaseException | None = None  # a leadership ended under our appends, not yet told
        # One wait tied to the leadership per round of appends, not one per append: the wait for
        # the end of the first append not yet committed, and the end of the last one since,
        # which a new wait takes over once the first is committed (see _append_committed).
        self._tied: asyncio.Future[None] | None = None
        self._tied_epoch = -1
        self._appended_end = 0

    @property
    def log_start_offset(self) -> int:
        return self.partition.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.partition.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.partition.high_watermark

    def append(self, records: list[OffsetsRecord], now_ms: int) -> int:
        """One batch of the records; a transaction's records (TxnRecordKey) go in a
        transactional batch of its producer, a marker (TxnMarkerKey) as a control batch."""
        self._check_replicas()
        first = records[0].key
        epoch = self.partition.leader_epoch
        if isinstance(first, TxnMarkerKey):
            info, _ = self.partition.log.append_marker(first.producer_id, first.producer_epoch, first.committed,
                                                       first.coordinator_epoch, leader_epoch=epoch, now_ms=now_ms)
            self.replicas.schedule_flush(self.partition)
            self.partition.appended()
            end = info.last_offset + 1
        else:
            if isinstance(first, TxnRecordKey):
                batch = build_key_value_batch([(r.key.key, r.value) for r in records], now_ms,
                                              compression=self.compression, producer_id=first.producer_id,
                                              producer_epoch=first.producer_epoch, is_transactional=True)
            else:
                batch = build_key_value_batch([(r.key, r.value) for r in records], now_ms, compression=self.compression)
            end = self.replicas.append(self.partition, batch, origin=AppendOrigin.COORDINATOR).last_offset + 1
        self._appended_end = end
        tied = self._tied
        if tied is None or tied.done() or self._tied_epoch != epoch:
            self._tie(end, epoch)
        return end

    def _tie(self, end: int, epoch: int) -> None:
        """Watch the leadership that appended up to `end` at `epoch` until the high watermark
        passes `end` (it fails if that leadership ends first)."""
        self._tied_epoch = epoch
        tied = self._tied = self.partition.wait_for_high_watermark(end, epoch)
        tied.add_done_callback(self._append_committed)

    def _append_committed(self, future: asyncio.Future[None]) -> None:
        if future.cancelled():
            return
        if future.exception() is None:
            # Appended since under the same epoch and not yet committed: watch on to their end
            # (a leadership that ended meanwhile fails the new wait at once).
            if future is self._tied and self._appended_end > self.partition.high_watermark:
                self._tie(self._appended_end, self._tied_epoch)
            return
        exc = future.exception()
        waiting = self._waiting
        if waiting is not None and not waiting.done():
            waiting.set_exception(exc)
        elif self._lost is None:
            self._lost = exc

    def below_min_insync(self) -> bool:
        if self.config["offsets.commit.required.acks"] != -1:
            return False
        topic = self.replicas.topic(self.partition.topic)
        return len(self.partition.isr) < self.config.min_insync_replicas(topic.configs if topic else {})

    def _check_replicas(self) -> None:
        """Refuse before appending, as a Produce with the same acks is refused: this broker no
        longer leads the partition, or offsets.commit.required.acks=-1 and fewer replicas are in
        sync than the offsets topic's min.insync.replicas (the coordinator answers
        COORDINATOR_NOT_AVAILABLE, and a lone replica never acknowledges a commit)."""
        partition = self.partition
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(f"{partition.topic}-{partition.index} is led by {partition.leader_id}")
        if self.below_min_insync():
            raise NotEnoughReplicasError(f"{partition.topic}-{partition.index}: {len(partition.isr)} in sync, "
                                         "fewer than min.insync.replicas")

    def wait_for_high_watermark(self, offset: int) -> asyncio.Future[None]:
        """The high watermark reaching `offset` whoever leads (a standby replays on across
        leaders), unless a leadership this writer appended under ended first."""
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        lost, self._lost = self._lost, None
        if lost is not None:
            waiting.set_exception(lost)
            return waiting
        # The partition's own waiter, not a future chained to it: the replay wakes one hop
        # after the high watermark moves. A cancelled replay cancels it, so it leaves the
        # partition's waiters at once; a lost leadership fails it (_append_committed).
        watched = self.partition.watch_high_watermark(offset)
        self._waiting = watched
        return watched

    def on_truncation(self, listener: Callable[[int], None]) -> Callable[[], None]:
        listeners = self.partition.log.truncation_listeners
        listeners.append(listener)

        def stop() -> None:
            if listener in listeners:
                listeners.remove(listener)
        return stop

    def read(self, position: int, upper_bound: int) -> tuple[list[LogRecord], int]:
        data = self.partition.log.read(position, self.load_buffer_size, upper_bound=upper_bound)
        records: list[LogRecord] = []
        for batch_position, header in iter_batches(data, validate=False):
            if header.is_control or header.is_transactional:
                self._transaction_records(data, batch_position, header, records)
            else:
                records += key_values(data, batch_position)  # the batch's list, read in C
            position = header.last_offset + 1
        return records, position

    def read_latest(self, position: int, upper_bound: int, latest: dict[Any, tuple[int, bytes | None]]) -> tuple[int, int]:
        """What `read` reads, each keyed record put into `latest` (key -> (offset, value), later
        ones replacing earlier ones) instead of listed: loading keeps only each key's last
        record. Returns the keyed records read and where reading ended."""
        data = self.partition.log.read(position, self.load_buffer_size, upper_bound=upper_bound)
        keyed = 0
        for batch_position, header in iter_batches(data, validate=False):
            if header.is_control or header.is_transactional:
                records: list[LogRecord] = []
                self._transaction_records(data, batch_position, header, records)
                for offset, key, value in records:
                    latest[key] = (offset, value)
                keyed += len(records)
            else:
                keyed += collect_latest(data, batch_position, latest)
            position = header.last_offset + 1
        return keyed, position

    @staticmethod
    def _transaction_records(data: bytes, batch_position: int, header: Any, records: list[LogRecord]) -> None:
        """A marker (TxnMarkerKey), or a transaction's keyed records (TxnRecordKey)."""
        if header.is_control:
            marker = read_marker(data, batch_position)
            if marker is not None:
                records.append((header.base_offset, TxnMarkerKey(header.producer_id, header.producer_epoch,  # type: ignore[arg-type]
                                                                 marker.committed, marker.coordinator_epoch,
                                                                 header.base_offset), None))
        else:
            records.extend((offset, TxnRecordKey(header.producer_id, header.producer_epoch, key, offset), value)  # type: ignore[misc]
                           for offset, key, value in key_values(data, batch_position) if key is not None)


class LogOffsetsTopic:
    """The offsets topic in this broker's PartitionManager."""

    def __init__(self, config: BrokerConfig, replicas: PartitionManager) -> None:
        self.config = config
        self.replicas = replicas

    def partition_count(self) -> int | None:
        topic = self.replicas.topic(OFFSETS_TOPIC)
        return topic.partitions if topic else None

    def create(self) -> None:
        self.replicas.create_topic(
            OFFSETS_TOPIC,
            self.config["offsets.topic.num.partitions"],
            {"cleanup.policy": "compact", "segment.bytes": self.config["offsets.topic.segment.bytes"]},
            internal=True,
        )

    def writer(self, index: int) -> PartitionWriter | None:
        partition = self.replicas.partition(OFFSETS_TOPIC, index)
        if partition is None:
            return None
        return LogPartitionWriter(self.config, self.replicas, partition,
                                  CompressionType(self.config["offsets.topic.compression.codec"]),
                                  self.config["offsets.load.buffer.size"])

    def partition_exists(self, topic: str, partition: int) -> bool:
        """Whether the cluster has the partition (in a cluster it need not be on this broker)."""
        return self.replicas.has_partition(topic, partition)

    def topic_partitions(self, topic: str) -> range:
        """The partition indexes the cluster has of `topic` (none if it does not exist): what
        partition_exists answers, for a whole topic of a commit at once."""
        metadata = self.replicas.topic(topic)
        return range(metadata.partitions) if metadata is not None else range(0)

    def on_deleted(self, callback: Callable[[], None]) -> None:
        self.replicas.on_topic_deleted(lambda name: callback() if name == OFFSETS_TOPIC else None)

    def error_code(self, exc: BaseException) -> ErrorCode:
        return error_code_for(exc)
