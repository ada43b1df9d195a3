"""Lag in time and Burrow's status of groups (`tidemark groups describe`, spark's lag history),
over the Kafka protocol only, so it works against any Kafka cluster (which answers neither
question itself):

- the first unconsumed record's timestamp: a fetch of one record at the committed offset;
- the commit history: the group's own partition of `__consumer_offsets`, read like any topic
  (each commit record carries its commit timestamp);
- the lag each commit had when it was made: ListOffsets by the commit's timestamp gives the log
  end offset of that moment (the first offset stamped at or after it).

Reads are bounded by the command's timeout and by HISTORY_RECORDS per offsets partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tidemark.coordinator.partitioner import partition_for
from tidemark.lag import WINDOW, Commit
from tidemark.records.offsets_schema import OFFSETS_TOPIC, OffsetCommitKey, decode_key, decode_offset_commit_value

# How far back from its end an offsets partition is read for commit histories.
HISTORY_RECORDS = 200_000

TP = tuple[str, int]
GTP = tuple[str, str, int]  # group, topic, partition
# Offsets of one partition this close are read in one sweep rather than fetched one by one.
SWEEP_GAP = 2_000


def probe_consumer(bootstrap: str, timeout_ms: int, extra: Mapping[str, str]) -> Consumer:
    """A consumer that only assigns and fetches: never joins a group, never commits."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "tidemark-groups-probe",
                     "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 50, "socket.timeout.ms": max(timeout_ms, 10),
                     "log_level": 0, "error_cb": lambda _error: None, **extra})


def _read(consumer: Consumer, starts: Mapping[TP, int], stops: Mapping[TP, int], deadline: float,
          take: Callable[[TP, Any], bool]) -> None:
    """Hand each partition's records from its start to take() until it answers True (done), the
    partition's stop offset (exclusive) or its end is reached, or the deadline passes."""
    todo = {tp for tp, start in starts.items() if start < stops[tp]}
    if not todo:
        return
    consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in sorted(todo)])
    try:
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=1000, timeout=min(0.2, max(deadline - time.monotonic(), 0))):
                tp = (msg.topic(), msg.partition())
                if tp not in todo:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        todo.discard(tp)
                    continue
                if take(tp, msg) or msg.offset() + 1 >= stops[tp]:
                    todo.discard(tp)
    finally:
        consumer.unassign()


def timestamps_at(consumer: Consumer, wanted: Mapping[TP, Iterable[int]], ends: Mapping[TP, int | None],
                  deadline: float) -> dict[tuple[TP, int], int | None]:
    """The timestamp of the first record at or after each offset (None: past the end, not
    fetched in time, or gone). Offsets of one partition less than SWEEP_GAP apart are read in
    one sweep, so many groups at nearby offsets cost one read, not one each."""
    found: dict[tuple[TP, int], int | None] = {}
    pending: dict[TP, list[int]] = {}
    for tp, offsets in wanted.items():
        end = ends.get(tp)
        for offset in set(offsets):
            if end is None or offset >= end:
                found[(tp, offset)] = None
            else:
                pending.setdefault(tp, []).append(offset)
    pending = {tp: sorted(offsets) for tp, offsets in pending.items()}
    while pending and time.monotonic() < deadline:
        runs: dict[TP, list[int]] = {}
        for tp, offsets in pending.items():
            run = offsets[:1]
            for offset in offsets[1:]:
                if offset - run[-1] > SWEEP_GAP:
                    break
                run.append(offset)
            runs[tp] = run
        taken = dict.fromkeys(runs, 0)

        def take(tp: TP, msg: Any) -> bool:
            run, at = runs[tp], taken[tp]
            while at < len(run) and run[at] <= msg.offset():
                found[(tp, run[at])] = msg.timestamp()[1]
                at += 1
            taken[tp] = at
            return at >= len(run)

        _read(consumer, {tp: run[0] for tp, run in runs.items()}, {tp: ends[tp] for tp in runs}, deadline, take)
        for tp, run in runs.items():
            for offset in run[taken[tp]:]:
                found[(tp, offset)] = None  # the log ended (or was cut) before it
            pending[tp] = pending[tp][len(run):]
        pending = {tp: offsets for tp, offsets in pending.items() if offsets}
    for tp, offsets in pending.items():
        found.update(((tp, offset), None) for offset in offsets)
    return found


def first_unconsumed_timestamps(consumer: Consumer, committed: Mapping[GTP, int], ends: Mapping[TP, int | None],
                                deadline: float) -> dict[GTP, int | None]:
    """The timestamp of the first record at or after each (group, topic, partition)'s committed
    offset (None: nothing there to consume, not fetched in time, or gone)."""
    wanted: dict[TP, set[int]] = {}
    for (_group, topic, partition), offset in committed.items():
        wanted.setdefault((topic, partition), set()).add(offset)
    stamps = timestamps_at(consumer, wanted, ends, deadline)
    return {key: stamps[(key[1:], offset)] for key, offset in committed.items()}


def commit_histories(consumer: Consumer, groups: Iterable[str], deadline: float
                     ) -> dict[str, dict[TP, list[tuple[int, int]]]]:
    """(offset, commit timestamp ms) of each group's commits per partition, oldest first, the last
    WINDOW kept; a tombstone (offset deleted or expired) clears the partition's history."""
    groups = set(groups)
    histories: dict[str, dict[TP, list[tuple[int, int]]]] = {group: {} for group in groups}
    metadata = consumer.list_topics(OFFSETS_TOPIC, timeout=max(deadline - time.monotonic(), 0.01))
    topic = metadata.topics.get(OFFSETS_TOPIC)
    if topic is None or topic.error is not None or not topic.partitions:
        return histories
    count = len(topic.partitions)
    wanted = {(OFFSETS_TOPIC, partition_for(group, count)) for group in groups}
    starts, stops = {}, {}
    for tp in wanted:
        low, high = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=max(deadline - time.monotonic(), 0.01),
                                                   cached=False)
        starts[tp], stops[tp] = max(low, high - HISTORY_RECORDS), high

    def take(_tp: TP, msg: Any) -> bool:
        if msg.key() is None:
            return False
        try:
            key = decode_key(msg.key())
        except ValueError:
            return False
        if not isinstance(key, OffsetCommitKey) or key.group not in groups:
            return False
        history = histories[key.group].setdefault((key.topic, key.partition), [])
        if msg.value() is None:
            history.clear()
            return False
        value = decode_offset_commit_value(msg.value())
        history.append((value.offset, value.commit_timestamp if value.commit_timestamp >= 0 else msg.timestamp()[1]))
        del history[:-WINDOW]
        return False

    _read(consumer, starts, stops, deadline, take)
    return histories


def ends_at_with_consumer(consumer: Consumer, asks: Mapping[TP, Iterable[int]], deadline: float
                          ) -> dict[tuple[TP, int], int | None]:
    """The log end of each partition at each time: the first offset stamped at or after it
    (ListOffsets by timestamp; None when nothing is stamped that late). One request a round,
    each partition once a round (Kafka refuses a partition twice in one ListOffsets)."""
    pending = {tp: sorted(set(times)) for tp, times in asks.items()}
    found: dict[tuple[TP, int], int | None] = {}
    for i in range(max((len(times) for times in pending.values()), default=0)):
        asked = [(tp, times[i]) for tp, times in pending.items() if i < len(times)]
        answers = consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in asked],
                                             timeout=max(deadline - time.monotonic(), 0.01))
        for (tp, ts), answer in zip(asked, answers, strict=True):
            found[(tp, ts)] = None if answer.offset is None or answer.offset < 0 else answer.offset
    return found


EndsAt = Callable[[Mapping[TP, Iterable[int]]], Mapping[tuple[TP, int], int | None]]


def lag_windows(histories: Mapping[GTP, list[tuple[int, int]]], ends: Mapping[TP, int | None], ends_at: EndsAt
                ) -> dict[GTP, list[Commit]]:
    """Each commit with the lag it had: the log end at the commit's time (`ends_at`; the end now
    when nothing is stamped that late) minus the committed offset."""
    asks: dict[TP, set[int]] = {}
    for (_group, topic, partition), history in histories.items():
        if ends.get((topic, partition)) is not None:
            asks.setdefault((topic, partition), set()).update(ts for _offset, ts in history)
    end_then = ends_at(asks)
    windows: dict[GTP, list[Commit]] = {}
    for key, history in histories.items():
        tp = key[1:]
        if ends.get(tp) is None:
            windows[key] = []
            continue
        windows[key] = []
        for offset, ts in history:
            end = end_then.get((tp, ts))
            end = ends[tp] if end is None else end
            windows[key].append(Commit(offset, ts, max(end - offset, 0)))
    return windows
