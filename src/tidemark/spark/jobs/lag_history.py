"""Lag in time, Burrow's status and lag over time for the lag report, from the commit history in
the offsets log (every commit record carries its commit timestamp).

`commit_history` keeps, per (group, topic, partition), the commits since the key's last
tombstone (the latest HISTORY_COMMITS of them). On the driver, `lag_details` then gives each
commit the lag it had when made (the log end at its timestamp: the first offset stamped at or
after it, the end now if none is) and each partition its time lag (now minus the timestamp of
the record at the committed offset) and status (tidemark.lag over the last WINDOW commits).
The numbers come from the cluster (ListOffsets by timestamp and one-record fetches, as `tidemark
groups describe` gathers them) or, offline, from one pass over each partition's segment files.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidemark import lag
from tidemark.spark.jobs.offsets_snapshot import decided_commits

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Commits per partition kept for the chart of lag over time (the status needs lag.WINDOW).
HISTORY_COMMITS = 100
LOOKUP_TIMEOUT_S = 30.0

Key = tuple[str, str, int]  # group, topic, partition
TP = tuple[str, int]


@dataclass(frozen=True)
class Details:
    lag_seconds: float | None
    status: str | None
    history: list[lag.Commit]  # oldest first, each with the lag it had when made


def commit_history(records: DataFrame) -> DataFrame:
    """(group, topic, partition, committed_offset, commit_ms) of the commits after each key's last
    tombstone, the latest HISTORY_COMMITS per key (a commit without a commit timestamp takes its
    record's)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = ("group", "topic", "partition")
    commits = decided_commits(records)  # transactional ones only once committed
    last_tombstone = (commits.where(F.col("tombstone")).groupBy(*key)
                      .agg(F.max(F.struct("offsets_partition", "log_offset")).alias("_tombstone")))
    newest_first = Window.partitionBy(*key).orderBy(F.col("offsets_partition").desc(), F.col("log_offset").desc())
    return (commits.where(~F.col("tombstone")).join(last_tombstone, list(key), "left")
            .where(F.col("_tombstone").isNull()
                   | (F.struct("offsets_partition", "log_offset") > F.col("_tombstone")))
            .withColumn("_rank", F.row_number().over(newest_first)).where(F.col("_rank") <= HISTORY_COMMITS)
            .select(*key, "committed_offset",
                    F.unix_millis(F.coalesce("commit_timestamp", "timestamp")).alias("commit_ms"),
                    "offsets_partition", "log_offset")
            .orderBy(*key, "offsets_partition", "log_offset")
            .select(*key, "committed_offset", "commit_ms"))


def lag_details(history: Iterable[tuple[str, str, int, int, int]], committed: Mapping[Key, int],
                ends: Mapping[TP, int | None], lookups: Lookups, now_ms: int) -> dict[Key, Details]:
    """Per committed key: its time lag, status and commit history with lags."""
    commits: dict[Key, list[tuple[int, int]]] = {}
    for group, topic, partition, offset, ts in history:
        commits.setdefault((group, topic, partition), []).append((offset, ts))
    known = {key: offset for key, offset in committed.items() if ends.get(key[1:]) is not None}
    stamps = lookups.first_timestamps(known, ends)
    ends_then = lookups.ends_at({key: [ts for _o, ts in commits.get(key, [])] for key in known}, ends)
    details = {}
    for key, offset in committed.items():
        end = ends.get(key[1:])
        if end is None:
            details[key] = Details(None, None, [])
            continue
        history = [lag.Commit(o, ts, max(then - o, 0))
                   for (o, ts), then in zip(commits.get(key, []), ends_then.get(key, []), strict=True)]
        current = lag.records_lag(offset, end)
        lag_ms = lag.time_lag_ms(now_ms, current, stamps.get(key))
        details[key] = Details(None if lag_ms is None else lag_ms / 1000,
                               lag.partition_status(history[-lag.WINDOW:], current, now_ms), history)
    return details


def group_lag_over_time(details: Mapping[Key, Details], current: Mapping[Key, int | None], now_ms: int
                        ) -> dict[str, list[tuple[int, int]]]:
    """Per group, (time ms, total lag) after its commits of each millisecond (a partition counts
    with the lag of its latest commit so far), ending with the lag now.

    Commits of one millisecond (a consumer restarting commits again at once) keep their log
    order: the later one is the partition's lag, whatever the numbers."""
    by_group: dict[str, list[tuple[int, TP, int]]] = {}
    for (group, topic, partition), detail in details.items():
        events = by_group.setdefault(group, [])
        events.extend((c.timestamp_ms, (topic, partition), c.lag) for c in detail.history)  # history: log order
    series = {}
    for group, events in by_group.items():
        lags: dict[TP, int] = {}
        points: list[tuple[int, int]] = []
        for ts, tp, value in sorted(events, key=lambda event: event[0]):  # stable: log order within a ms
            lags[tp] = value
            total = sum(lags.values())
            if points and points[-1][0] == ts:
                points[-1] = (ts, total)
            else:
                points.append((ts, total))
        now_total = sum(v or 0 for (g, _t, _p), v in current.items() if g == group)
        series[group] = [*points, (now_ms, now_total)]
    return series


class Lookups:
    """Where the record timestamps and past log ends come from."""

    def first_timestamps(self, committed: Mapping[Key, int], ends: Mapping[TP, int | None]) -> dict[Key, int | None]:
        raise NotImplementedError

    def ends_at(self, stamps: Mapping[Key, list[int]], ends: Mapping[TP, int | None]) -> dict[Key, list[int]]:
        raise NotImplementedError


class ClusterLookups(Lookups):
    """Over the Kafka protocol, as `tidemark groups describe` asks (quiet client)."""

    def __init__(self, bootstrap_servers: str, config: Mapping[str, Any] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.config = dict(config or {})

    def _consumer(self):
        from tidemark.client.lag_probe import probe_consumer

        return probe_consumer(self.bootstrap_servers, int(LOOKUP_TIMEOUT_S * 1000), self.config)

    def first_timestamps(self, committed, ends):
        from tidemark.client.lag_probe import first_unconsumed_timestamps

        consumer = self._consumer()
        try:
            return first_unconsumed_timestamps(consumer, committed, ends, time.monotonic() + LOOKUP_TIMEOUT_S)
        finally:
            consumer.close()

    def ends_at(self, stamps, ends):
        from tidemark.client.lag_probe import ends_at_with_consumer

        asks: dict[TP, set[int]] = {}
        for key, times in stamps.items():
            asks.setdefault(key[1:], set()).update(times)
        consumer = self._consumer()
        try:
            found = ends_at_with_consumer(consumer, asks, time.monotonic() + LOOKUP_TIMEOUT_S)
        finally:
            consumer.close()
        answers: dict[Key, list[int]] = {}
        for key, times in stamps.items():
            end = ends[key[1:]]
            answers[key] = [end if found.get((key[1:], ts)) is None else found[(key[1:], ts)] for ts in times]
        return answers


class DataDirLookups(Lookups):
    """From a data directory's segment files: one pass over each partition, decoding only the
    batches that hold an answer."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir)

    def _scan(self, tp: TP, offsets: set[int], stamps: set[int]) -> tuple[dict[int, int], dict[int, int]]:
        """({offset: timestamp of the first record at or after it}, {timestamp: first offset stamped at or after it})."""
        from tidemark.log.direct_read import iter_segment_data
        from tidemark.records import decode_records, iter_batches

        pending_offsets, pending_stamps = sorted(offsets), sorted(stamps)
        at_offset: dict[int, int] = {}
        at_stamp: dict[int, int] = {}
        directory = self.data_dir / f"{tp[0]}-{tp[1]}"
        if not directory.is_dir():
            return at_offset, at_stamp
        for _name, data, first in iter_segment_data(directory):
            for position, header in iter_batches(data, validate=False):
                if header.is_control or header.next_offset <= first:
                    continue
                wanted = ((pending_offsets and header.next_offset > pending_offsets[0])
                          or (pending_stamps and header.max_timestamp >= pending_stamps[0]))
                if not wanted:
                    continue
                for record in decode_records(data, position):
                    if record.offset < first:
                        continue
                    while pending_offsets and record.offset >= pending_offsets[0]:
                        at_offset[pending_offsets.pop(0)] = record.timestamp
                    while pending_stamps and record.timestamp >= pending_stamps[0]:
                        at_stamp[pending_stamps.pop(0)] = record.offset
            if not pending_offsets and not pending_stamps:
                break
        return at_offset, at_stamp

    def _scan_all(self, committed: Mapping[Key, int], stamps: Mapping[Key, list[int]]):
        tps = {key[1:] for key in committed} | {key[1:] for key in stamps}
        return {tp: self._scan(tp, {o for k, o in committed.items() if k[1:] == tp},
                               {ts for k, s in stamps.items() if k[1:] == tp for ts in s}) for tp in tps}

    def first_timestamps(self, committed, ends):
        scans = self._scan_all(committed, {})
        return {key: scans[key[1:]][0].get(offset) if offset < (ends[key[1:]] or 0) else None
                for key, offset in committed.items()}

    def ends_at(self, stamps, ends):
        scans = self._scan_all({}, stamps)
        return {key: [min(scans[key[1:]][1].get(ts, ends[key[1:]]), ends[key[1:]]) for ts in s]
                for key, s in stamps.items()}
