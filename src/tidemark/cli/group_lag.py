"""Lag in time and Burrow's status for `tidemark groups describe`, over the Kafka protocol only,
so it works against any Kafka cluster (which answers neither question itself):

- the first unconsumed record's timestamp: a fetch of one record at the committed offset;
- the commit history: the group's own partition of `__consumer_offsets`, read like any topic
  (each commit record carries its commit timestamp);
- the lag each commit had when it was made: ListOffsets by the commit's timestamp gives the log
  end offset of that moment (the first offset stamped at or after it).

Reads are bounded by the command's timeout and by HISTORY_RECORDS per offsets partition.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tidemark.coordinator.partitioner import partition_for
from tidemark.lag import WINDOW, Commit
from tidemark.records.offsets_schema import OFFSETS_TOPIC, OffsetCommitKey, decode_key, decode_offset_commit_value

# How far back from its end an offsets partition is read for commit histories.
HISTORY_RECORDS = 200_000

TP = tuple[str, int]


def probe_consumer(bootstrap: str, timeout_ms: int, extra: Mapping[str, str]) -> Consumer:
    """A consumer that only assigns and fetches: never joins a group, never commits."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": "tidemark-groups-probe",
                     "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest",
                     "fetch.wait.max.ms": 50, "socket.timeout.ms": max(timeout_ms, 10),
                     "log_level": 0, "error_cb": lambda _error: None, **extra})


def _fetch(consumer: Consumer, starts: Mapping[TP, int], stop: Mapping[TP, int], deadline: float,
           want_one: bool) -> dict[TP, list[Any]]:
    """Messages from each partition's start up to `stop` (exclusive), or just the first with want_one."""
    todo = {tp for tp, start in starts.items() if start < stop[tp]}
    got: dict[TP, list[Any]] = {tp: [] for tp in starts}
    if not todo:
        return got
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
                got[tp].append(msg)
                if want_one or msg.offset() + 1 >= stop[tp]:
                    todo.discard(tp)
    finally:
        consumer.unassign()
    return got


def first_unconsumed_timestamps(consumer: Consumer, committed: Mapping[TP, int], ends: Mapping[TP, int | None],
                                deadline: float) -> dict[TP, int | None]:
    """The timestamp of the record at each committed offset (None: not fetched in time, or gone)."""
    lagging = {tp: offset for tp, offset in committed.items() if ends.get(tp) is not None and offset < ends[tp]}
    found = _fetch(consumer, lagging, {tp: ends[tp] for tp in lagging}, deadline, want_one=True)
    return {tp: messages[0].timestamp()[1] if messages else None for tp, messages in found.items()}


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
    for messages in _fetch(consumer, starts, stops, deadline, want_one=False).values():
        for msg in messages:
            if msg.key() is None:
                continue
            try:
                key = decode_key(msg.key())
            except ValueError:
                continue
            if not isinstance(key, OffsetCommitKey) or key.group not in groups:
                continue
            history = histories[key.group].setdefault((key.topic, key.partition), [])
            if msg.value() is None:
                history.clear()
                continue
            value = decode_offset_commit_value(msg.value())
            history.append((value.offset, value.commit_timestamp if value.commit_timestamp >= 0 else msg.timestamp()[1]))
            del history[:-WINDOW]
    return histories


def lag_windows(consumer: Consumer, history: Mapping[TP, list[tuple[int, int]]], ends: Mapping[TP, int | None],
                deadline: float) -> dict[TP, list[Commit]]:
    """Each commit with the lag it had: the log end at the commit's time (ListOffsets by timestamp;
    the end now when nothing is stamped that late) minus the committed offset."""
    windows: dict[TP, list[Commit]] = {tp: [] for tp in history}
    for i in range(max((len(h) for h in history.values()), default=0)):
        asked = [(tp, h[i]) for tp, h in history.items() if i < len(h) and ends.get(tp) is not None]
        if not asked:
            continue
        answers = consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), (_o, ts) in asked],
                                             timeout=max(deadline - time.monotonic(), 0.01))
        end_then = {(a.topic, a.partition): a.offset for a in answers}
        for tp, (offset, ts) in asked:
            end = end_then.get(tp, -1)
            end = ends[tp] if end is None or end < 0 else end
            windows[tp].append(Commit(offset, ts, max(end - offset, 0)))
    return windows
