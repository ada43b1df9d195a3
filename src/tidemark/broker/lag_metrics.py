"""Consumer lag on the broker's Prometheus endpoint: per group, topic and partition, the lag in
records and seconds, the committed offset and Burrow's status (tidemark.lag), from what the
broker holds; no client round trips.

- committed offsets: the coordinator's offset cache (loaded shards only);
- log end: the partition's high watermark (what ListOffsets LATEST answers);
- time lag: the timestamp of the first record at or after the committed offset, read locally
  (cached per partition until the committed offset moves);
- status: a CommitWindows fed by tailing each offsets partition's log from where the last scrape
  stopped (every commit record carries its commit timestamp); a commit's lag is the log end at
  its time, as ListOffsets by the commit's timestamp answers it.

Computed at scrape time (so a scrape sees the commit just acknowledged, and nothing runs while
nobody scrapes) but on the event loop, which owns all of that state: the HTTP server's thread
hands the work to the loop and waits. Work per scrape is bounded: at most
`tidemark.lag.metrics.max.series` partitions (label sets; the rest are counted in
tidemark_consumergroup_series_dropped), at most TAIL_BYTES_PER_SCRAPE of offsets log, and the
loop is yielded every YIELD_EVERY partitions.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tidemark import lag
from tidemark.log.errors import OffsetOutOfRangeError
from tidemark.records import decode_records, iter_batches, iter_key_values
from tidemark.records.offsets_schema import OFFSETS_TOPIC, OffsetCommitKey, decode_key, decode_offset_commit_value

if TYPE_CHECKING:
    from tidemark.broker.server import Broker

log = structlog.get_logger("tidemark.lag_metrics")

TAIL_BYTES_PER_SCRAPE = 16 * 1024 * 1024
YIELD_EVERY = 500
SCRAPE_TIMEOUT_S = 10.0
# The value of tidemark_consumergroup_status (its `status` label names it): worse is higher.
STATUS_CODES = {lag.OK: 0, lag.WARN: 1, lag.ERR: 2, lag.STOP: 3, lag.STALL: 4, lag.REWIND: 5}
LABELS = ["group", "topic", "partition"]


@dataclass(frozen=True)
class Row:
    group: str
    topic: str
    partition: int
    committed: int
    lag: int | None
    lag_seconds: float | None
    status: str | None


class LagTracker:
    """The state behind the lag metrics; every method runs on the broker's event loop."""

    def __init__(self, broker: Broker, max_series: int) -> None:
        self.broker = broker
        self.max_series = max_series
        self.windows = lag.CommitWindows()
        self._positions: dict[int, int] = {}  # offsets partition -> next offset to read
        self._first_unconsumed: dict[tuple[str, str, int], tuple[int, int | None]] = {}

    async def rows(self) -> tuple[list[Row], int]:
        """The rows to export (sorted, at most max_series) and how many were dropped."""
        self._tail_offsets_log()
        now = self.broker.clock.now_ms()
        committed = sorted(self._committed_offsets())
        dropped = max(len(committed) - self.max_series, 0)
        rows = []
        for i, (group, topic, partition, offset) in enumerate(committed[: self.max_series]):
            rows.append(self._row(group, topic, partition, offset, now))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        live = {(r.group, r.topic, r.partition) for r in rows}
        for key in [k for k in self._first_unconsumed if k not in live]:
            del self._first_unconsumed[key]
        return rows, dropped

    def _committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        for runtime in list(self.broker.coordinator.shards.values()):
            if runtime.state.value != "active":
                continue
            store = runtime.shard.offsets
            for group in store.groups():
                for (topic, partition), value in store.group_offsets(group).items():
                    yield group, topic, partition, value.offset

    def _row(self, group: str, topic: str, partition_index: int, committed: int, now_ms: int) -> Row:
        partition = self.broker.replicas.partition(topic, partition_index)
        if partition is None:  # a deleted topic's offsets stay until they expire
            return Row(group, topic, partition_index, committed, None, None, None)
        records_lag = lag.records_lag(committed, partition.high_watermark)
        stamp = self._first_unconsumed_timestamp((group, topic, partition_index), partition, committed, records_lag)
        lag_ms = lag.time_lag_ms(now_ms, records_lag, stamp)
        window = self.windows.window(group, topic, partition_index)
        return Row(group, topic, partition_index, committed, records_lag,
                   None if lag_ms is None else lag_ms / 1000, lag.partition_status(window, records_lag, now_ms))

    def _first_unconsumed_timestamp(self, key: tuple[str, str, int], partition: Any, committed: int,
                                    records_lag: int | None) -> int | None:
        if not records_lag:
            return None
        cached = self._first_unconsumed.get(key)
        if cached is not None and cached[0] == committed:
            return cached[1]
        stamp = _record_timestamp_at(partition, committed)
        if stamp is not None:  # not found yet may be found next time (e.g. a batch being flushed)
            self._first_unconsumed[key] = (committed, stamp)
        return stamp

    def _tail_offsets_log(self) -> None:
        """Feed the commit records appended since the last scrape into the windows."""
        budget = TAIL_BYTES_PER_SCRAPE
        new: dict[tuple[str, str, int], tuple[bool, list[tuple[int, int]]]] = {}
        for index in sorted(self.broker.coordinator.shards):
            partition = self.broker.replicas.partition(OFFSETS_TOPIC, index)
            if partition is None:  # the offsets topic was deleted
                continue
            position = max(self._positions.get(index, 0), partition.log.log_start_offset)
            end = partition.high_watermark
            if position > end:  # the log was truncated or replaced: start over
                position = partition.log.log_start_offset
            try:
                while position < end and budget > 0:
                    data = partition.log.read(position, min(budget, 1024 * 1024), upper_bound=end)
                    if not data:
                        break
                    budget -= len(data)
                    for batch_position, header in iter_batches(data, validate=False):
                        for _offset, key, value in iter_key_values(data, batch_position):
                            _collect_commit(new, key, value, header.max_timestamp)
                        position = header.last_offset + 1
            except Exception:  # noqa: BLE001 - an unreadable offsets partition must not fail the scrape
                log.warning("lag_metrics_offsets_unreadable", partition=index, position=position, exc_info=True)
            self._positions[index] = position
        for (group, topic, partition_index), (reset, commits) in new.items():
            if reset:
                self.windows.forget(group, topic, partition_index)
            partition = self.broker.replicas.partition(topic, partition_index)
            if partition is None:
                continue
            for offset, timestamp in commits:
                self.windows.add(group, topic, partition_index,
                                 lag.Commit(offset, timestamp, _lag_at(partition, offset, timestamp)))


def _lag_at(partition: Any, offset: int, timestamp_ms: int) -> int:
    """The lag a commit had when made: the log end of that moment (the first offset stamped at or
    after it, as ListOffsets by timestamp answers; the end now if none is) minus the offset."""
    end = partition.high_watermark
    found = partition.log.offset_for_timestamp(timestamp_ms, upper_bound=end)
    then = found[0] if found is not None and found[0] < end else end
    return max(then - offset, 0)


def _collect_commit(new: dict[tuple[str, str, int], tuple[bool, list[tuple[int, int]]]], key_bytes: Any,
                    value_bytes: Any, batch_timestamp: int) -> None:
    """Add one offsets record to `new`: (whether a tombstone cleared the partition's history, the
    last WINDOW commits after it as (offset, commit timestamp))."""
    if key_bytes is None:
        return
    try:
        key = decode_key(bytes(key_bytes))
    except ValueError:
        return
    if not isinstance(key, OffsetCommitKey):
        return
    tp = (key.group, key.topic, key.partition)
    if value_bytes is None:  # offsets deleted or expired: their history goes with them
        new[tp] = (True, [])
        return
    value = decode_offset_commit_value(bytes(value_bytes))
    reset, commits = new.setdefault(tp, (False, []))
    commits.append((value.offset, value.commit_timestamp if value.commit_timestamp >= 0 else batch_timestamp))
    del commits[: -lag.WINDOW]


def _record_timestamp_at(partition: Any, offset: int) -> int | None:
    """The timestamp of the first record at or after `offset` below the high watermark (a fetch
    from an offset below the log start starts at the log start, as a consumer resetting to the
    earliest would)."""
    log_ = partition.log
    offset = max(offset, log_.log_start_offset)
    end = partition.high_watermark
    while offset < end:
        try:
            data = log_.read(offset, 1, upper_bound=end)
        except OffsetOutOfRangeError:
            return None
        if not data:
            return None
        for batch_position, header in iter_batches(data, validate=False):
            if header.is_control:
                offset = header.last_offset + 1
                continue
            for record in decode_records(data, batch_position):
                if record.offset >= offset:
                    return record.timestamp
            offset = header.last_offset + 1
    return None


class LagCollector(Collector):
    """The lag families, computed on the broker's loop at each scrape (collect() runs in the
    metrics server's thread)."""

    def __init__(self, tracker: LagTracker, loop: asyncio.AbstractEventLoop) -> None:
        self.tracker = tracker
        self.loop = loop

    def describe(self) -> list[Any]:
        # Registering must not collect: collect() waits on the loop that registers.
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        future = None
        try:
            future = asyncio.run_coroutine_threadsafe(self.tracker.rows(), self.loop)
            rows, dropped = future.result(SCRAPE_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            log.warning("lag_metrics_timed_out", seconds=SCRAPE_TIMEOUT_S)
            return
        except RuntimeError:  # the loop is closed: the broker is stopping
            return
        except Exception:  # noqa: BLE001 - the other metrics must still be served
            log.exception("lag_metrics_failed")
            return
        families = {
            "lag": GaugeMetricFamily("tidemark_consumergroup_lag", "Log end offset minus committed offset", labels=LABELS),
            "seconds": GaugeMetricFamily(
                "tidemark_consumergroup_lag_seconds",
                "Now minus the timestamp of the first unconsumed record (0 when caught up)", labels=LABELS),
            "committed": GaugeMetricFamily("tidemark_consumergroup_committed_offset", "Committed offset",
                                           labels=LABELS),
            "status": GaugeMetricFamily(
                "tidemark_consumergroup_status",
                "Burrow's status over the last commits: 0 OK, 1 WARN, 3 STOP, 4 STALL, 5 REWIND (named by `status`)",
                labels=[*LABELS, "status"]),
        }
        for row in rows:
            labels = [row.group, row.topic, str(row.partition)]
            families["committed"].add_metric(labels, row.committed)
            if row.lag is not None:
                families["lag"].add_metric(labels, row.lag)
            if row.lag_seconds is not None:
                families["seconds"].add_metric(labels, row.lag_seconds)
            if row.status is not None:
                families["status"].add_metric([*labels, row.status], STATUS_CODES[row.status])
        yield from families.values()
        yield GaugeMetricFamily(
            "tidemark_consumergroup_series_dropped",
            "Partitions of groups not exported at the last scrape, over tidemark.lag.metrics.max.series",
            value=dropped)


def install(broker: Broker) -> LagCollector | None:
    """Register the lag metrics for `broker` (running on the current loop), unless turned off."""
    from prometheus_client import REGISTRY

    if not broker.config["tidemark.lag.metrics.enable"]:
        return None
    collector = LagCollector(LagTracker(broker, broker.config["tidemark.lag.metrics.max.series"]),
                             asyncio.get_running_loop())
    REGISTRY.register(collector)
    return collector


def uninstall(collector: LagCollector | None) -> None:
    from prometheus_client import REGISTRY

    if collector is not None:
        REGISTRY.unregister(collector)
