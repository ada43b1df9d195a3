"""The "tidemark" format: Kafka topics as a Spark batch and streaming source, and a sink.

    spark.readStream.format("tidemark")
        .option("bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "events")
        .option("group.id", "my-pipeline")   # commit each finished batch's end offsets here
        .load()

Planning (which offsets each batch covers) happens on the driver; reading happens in Spark
tasks, one per partition with records to read (see topic_reader). The checkpoint stays the
source of truth for exactly-once inside Spark; committing to the group makes the pipeline's
progress visible to `tidemark groups describe` and any lag tool, and lets a new query start
from it (startingOffsets=group).

When is a batch finished? Spark calls the reader's commit(end) for batch N only when it starts
batch N+1, so the last batch of an availableNow run would never be committed. But Spark asks
latestOffset(start) only after the batch that ended at `start` has completed (micro-batches run
one at a time), including once more after an availableNow run's last batch, so that call
commits `start` to the group.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from tidemark.spark.cluster import ClusterClient
from tidemark.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    Partition,
    PartitionOffsets,
    SourceOptions,
    offsets_from_json,
    offsets_to_json,
    parse_sink_options,
    parse_source_options,
)
from tidemark.spark.shipping import ShippedToExecutors
from tidemark.spark.topic_reader import TOPIC_SCHEMA, TOPIC_SCHEMA_WITH_HEADERS, OffsetRange, data_loss, read_range

log = logging.getLogger(__name__)


class TidemarkDataSource(ShippedToExecutors, DataSource):
    @classmethod
    def name(cls) -> str:
        return "tidemark"

    def schema(self) -> str:
        # As the connector: a headers column only with includeHeaders=true.
        include = str(self.options.get("includeHeaders", "false")).lower() == "true"
        return TOPIC_SCHEMA_WITH_HEADERS if include else TOPIC_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TopicStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from tidemark.spark.sink import TopicWriter

        return TopicWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from tidemark.spark.sink import TopicStreamWriter

        return TopicStreamWriter(parse_sink_options(self.options), schema)


class _Planner:
    """Offset planning shared by the batch and the streaming reader (runs on the driver)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: ClusterClient | None = None
        # The readers' group.id (they only assign and fetch, never join nor commit): the group's
        # if one is given, else groupIdPrefix and an id of this query, as the connector names them.
        self.reader_group_id = options.group_id or f"{options.group_id_prefix}-{uuid.uuid4()}"

    @property
    def client(self) -> ClusterClient:
        # Created on first use, in the process that plans.
        if self._client is None:
            self._client = ClusterClient(self.options.consumer_config(), self.options.fetch_offset_retries,
                                         self.options.fetch_offset_retry_interval_ms)
        return self._client

    def __getstate__(self) -> dict:
        # Readers are pickled to the planner process and, inside Spark's read function, to every
        # task: the client (its sockets and threads) stays here, a copy makes its own on first use.
        return {**self.__dict__, "_client": None}

    def close(self) -> None:
        self._client = None  # AdminClient has no close(): dropping the last reference destroys it

    def partitions(self) -> list[Partition]:
        found = self.client.partitions(self.options.subscription)
        if not found:
            # Like a Kafka consumer: a topic that does not exist yet is read once it does.
            log.warning("no partitions yet for %s", self.options.subscription.pattern
                        or ", ".join(self.options.subscription.topics))
        return found

    def resolve(self, spec: OffsetSpec, partitions: list[Partition], what: str) -> PartitionOffsets:
        """startingOffsets / endingOffsets made concrete for `partitions`."""
        if spec.kind == "earliest":
            return self.client.earliest(partitions)
        if spec.kind == "latest":
            return self.client.latest(partitions)
        specific = spec.specific
        if spec.kind in ("timestamp", "global_timestamp"):
            return self._resolve_timestamps(spec, partitions, what)
        if spec.kind == "group":
            committed = self.client.committed(self.options.group_id, partitions)
            missing = [p for p in partitions if p not in committed]
            fallback = self.client.earliest if self.options.group_fallback == "earliest" else self.client.latest
            return {**fallback(missing), **committed}
        unknown = sorted(set(partitions) - set(specific))
        if unknown:
            raise OptionError(f"{what} must give an offset for every partition read; missing: "
                              + ", ".join(f"{t}-{p}" for t, p in unknown))
        earliest_wanted = [p for p in partitions if specific[p] == EARLIEST]
        latest_wanted = [p for p in partitions if specific[p] == LATEST]
        return {**{p: specific[p] for p in partitions}, **self.client.earliest(earliest_wanted),
                **self.client.latest(latest_wanted)}

    def _resolve_timestamps(self, spec: OffsetSpec, partitions: list[Partition], what: str) -> PartitionOffsets:
        """Each partition's first offset stamped at or after its timestamp; where there is none,
        the latest offset or an error, as `spec.unmatched` says."""
        if spec.kind == "global_timestamp":
            stamps = {p: spec.timestamp for p in partitions}
        else:
            unknown = sorted(set(partitions) - set(spec.specific))
            if unknown:
                raise OptionError(f"{what} must give a timestamp for every partition read; missing: "
                                  + ", ".join(f"{t}-{p}" for t, p in unknown))
            stamps = {p: spec.specific[p] for p in partitions}
        found = self.client.for_timestamps(stamps)
        unmatched = sorted(p for p, offset in found.items() if offset < 0)
        if unmatched and spec.unmatched == "error":
            raise OptionError(f"{what}: no record stamped at or after the timestamp in "
                              + ", ".join(f"{t}-{p} ({stamps[(t, p)]})" for t, p in unmatched)
                              + '; startingOffsetsByTimestampStrategy=latest starts those at the latest offset')
        return {**found, **self.client.latest(unmatched)}

    def offset_ranges(self, start: PartitionOffsets, end: PartitionOffsets) -> list[OffsetRange]:
        """One task per partition with records in [start, end), split further for minPartitions."""
        new = [p for p in end if p not in start]
        if new:
            # Partitions that appeared since the previous batch are read from their beginning.
            start = {**self.client.earliest(new), **start}
        ranges = []
        for partition, until in sorted(end.items()):
            since = start[partition]
            if until < since:
                data_loss(*partition, until, since, "the partition's offsets went backwards",
                          self.options.fail_on_data_loss)
                continue
            if until > since:
                ranges.append(OffsetRange(partition[0], partition[1], since, until,
                                          {**self.options.consumer_config(), "group.id": self.reader_group_id},
                                          self.options.fail_on_data_loss, self.options.poll_timeout_ms,
                                          self.options.include_headers))
        return split_ranges(ranges, self.options.min_partitions, self.options.max_records_per_partition)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None = None) -> list[OffsetRange]:
    """As Spark's connector: maxRecordsPerPartition first splits each range into pieces of at most
    that many offsets; then, with fewer ranges than minPartitions, each is split in proportion to
    its size (at least one piece, at most one per offset). Pieces of one range differ by one at most."""
    if max_records:
        ranges = [piece for r in ranges for piece in _pieces(r, -(-(r.end - r.start) // max_records))]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.end - r.start for r in ranges)
    return [piece for r in ranges
            for piece in _pieces(r, max(1, min(r.end - r.start, round((r.end - r.start) * min_partitions / total))))]


def _pieces(r: OffsetRange, count: int) -> list[OffsetRange]:
    step, extra = divmod(r.end - r.start, count)
    pieces = []
    start = r.start
    for i in range(count):
        end = start + step + (1 if i < extra else 0)
        pieces.append(dataclasses.replace(r, start=start, end=end))
        start = end
    return pieces


class TopicBatchReader(ShippedToExecutors, DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.planner = _Planner(options)

    def partitions(self) -> list[InputPartition]:
        options = self.planner.options
        partitions = self.planner.partitions()
        start = self.planner.resolve(options.starting, partitions, "startingOffsets")
        end = self.planner.resolve(options.ending, partitions, "endingOffsets")
        return self.planner.offset_ranges(start, end)

    def read(self, partition: OffsetRange):
        return read_range(partition)


def limit_offsets(start: PartitionOffsets, latest: PartitionOffsets, max_rows: int) -> PartitionOffsets:
    """Advance at most max_rows offsets in all, shared out in proportion to each partition's backlog.

    Floors first, then the leftover offsets one each to the largest remainders, so a batch takes
    exactly min(max_rows, backlog) and every partition with a backlog keeps moving over time.
    """
    backlog = {p: max(0, latest[p] - start.get(p, latest[p])) for p in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(latest)
    shares = {p: divmod(lag * max_rows, total) for p, lag in backlog.items()}
    end = {p: start.get(p, latest[p]) + share for p, (share, _) in shares.items()}
    leftover = max_rows - sum(share for share, _ in shares.values())
    for p in sorted(shares, key=lambda p: (-shares[p][1], p))[:leftover]:
        end[p] += 1
    return end


class TopicStreamReader(ShippedToExecutors, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.planner = _Planner(options)
        self._initial: PartitionOffsets | None = None
        self._planned = False  # has this reader planned a batch (so `start` ends a finished one)?
        self._target: PartitionOffsets | None = None  # availableNow: read no further than this
        self._committed: PartitionOffsets | None = None
        self._last_trigger_ms: float | None = None  # minOffsetsPerTrigger: when a batch last got data
        self.clock = time.monotonic

    def initialOffset(self) -> dict:
        if self._initial is None:
            options = self.planner.options
            self._initial = self.planner.resolve(options.starting, self.planner.partitions(), "startingOffsets")
        return offsets_to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.planner.options.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.planner.client.latest(self.planner.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        if self._planned or begin != self._initial:
            self._commit_to_group(begin)
        if self._target is not None:
            latest = {p: max(offset, begin.get(p, offset)) for p, offset in self._target.items()}
        else:
            latest = self.planner.client.latest(self.planner.partitions())
        new = [p for p in latest if p not in begin]
        if new:
            # Rate-limit new partitions from where they will be read: their beginning.
            begin = {**self.planner.client.earliest(new), **begin}
        # Partitions no longer there (topic deleted) keep their last offset.
        latest = {**{p: o for p, o in begin.items() if p not in latest}, **latest}
        if self._too_few(begin, latest):
            return start  # no batch yet: wait for minOffsetsPerTrigger or maxTriggerDelay
        if isinstance(limit, ReadMaxRows):
            latest = limit_offsets(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def _too_few(self, begin: PartitionOffsets, latest: PartitionOffsets) -> bool:
        """minOffsetsPerTrigger: hold a batch back while fewer offsets are available, unless
        maxTriggerDelay has passed since the last batch that had data (or there was none yet).
        An availableNow run reads what is there regardless, as it would otherwise never end."""
        options = self.planner.options
        available = sum(max(latest[p] - begin.get(p, latest[p]), 0) for p in latest)
        if not options.min_offsets_per_trigger or self._target is not None or not available:
            return False
        now_ms = self.clock() * 1000
        if (available < options.min_offsets_per_trigger and self._last_trigger_ms is not None
                and now_ms - self._last_trigger_ms < options.max_trigger_delay_ms):
            return True
        self._last_trigger_ms = now_ms
        return False

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        self._planned = True
        return self.planner.offset_ranges(offsets_from_json(start), offsets_from_json(end))

    def read(self, partition: OffsetRange):
        return read_range(partition)

    def commit(self, end: dict) -> None:
        self._commit_to_group(offsets_from_json(end))

    def _commit_to_group(self, offsets: PartitionOffsets) -> None:
        group_id = self.planner.options.group_id
        if group_id is None or offsets == self._committed:
            return
        if self.planner.client.commit(group_id, offsets):
            self._committed = offsets
            log.info("committed batch end offsets to group %s: %s", group_id, offsets_to_json(offsets))

    def stop(self) -> None:
        self.planner.close()
