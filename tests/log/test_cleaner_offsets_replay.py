"""Cleaning an offsets partition changes nothing a replay of it gives (the group coordinator's
load): hypothesis writes plain offset commits, transactional ones (TxnOffsetCommit: the
coordinator's transactional batches, then a COMMIT or ABORT marker), offset tombstones, and
runs cleanings (within and past delete.retention.ms); after each cleaning and after a reload,
the committed offsets and the transactions' pending offsets are exactly those of a replay before
it."""

from __future__ import annotations

import time
from types import SimpleNamespace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidemark.broker.coordinator_io import LogPartitionWriter
from tidemark.coordinator.offsets import unpack_fetched
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.log import UnifiedLog
from tidemark.log.cleaner import Cleaner
from tidemark.records import build_batch
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, encode_offset_commit_value

from .conftest import NOW
from .test_cleaner import DAY, compact_config

GROUPS = ("g1", "g2")
PRODUCERS = (11, 12, 13)


def _key(group: str, partition: int) -> bytes:
    return encode_key(OffsetCommitKey(group, "t", partition))


def _value(offset: int) -> bytes:
    return encode_offset_commit_value(OffsetCommitValue(offset, -1, "m%d" % offset, NOW, -1))


def replay(log: UnifiedLog) -> tuple:
    """A fresh shard loaded as the coordinator runtime loads (the last record per key, in log
    order, read by the broker's reader of offsets partitions), and what it holds."""
    reader = object.__new__(LogPartitionWriter)  # only its reading half: the log and the buffer size
    reader.partition, reader.load_buffer_size = SimpleNamespace(log=log), 1 << 20
    latest: dict = {}
    position = log.log_start_offset
    while position < log.high_watermark:
        _, position = reader.read_latest(position, log.high_watermark, latest)
    latest = dict(sorted(latest.items(), key=lambda item: item[1][0]))  # in log order, as loading replays
    shard = GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: True)
    for key, (offset, value) in latest.items():
        shard.replay(offset, key, value, now_ms=NOW)
    offsets = {g: {tp: (o.offset, o.metadata) for tp, o in shard.offsets.group_offsets(g).items()}
               for g in GROUPS if shard.offsets.group_offsets(g)}
    pending = {pid: {g: {tp: (at, unpack_fetched(v)[0]) for tp, (at, v) in tps.items()} for g, tps in groups.items()}
               for pid, groups in shard.txn_offsets.committed.items()}
    # Not the groups themselves: replaying a commit makes its group (an empty "simple" group, as
    # Kafka's coordinator does), and when a tombstone has since deleted every offset the group
    # held, compaction drops the records that made it, in Kafka as here; expiry deletes such a
    # group anyway. What a group holds, its offsets and pending offsets, is compared.
    return offsets, pending


tp_st = st.tuples(st.sampled_from(GROUPS), st.integers(0, 2))
step = st.one_of(
    st.tuples(st.just("commit"), tp_st, st.integers(0, 1000)),
    st.tuples(st.just("txn"), st.sampled_from(PRODUCERS), st.lists(st.tuples(tp_st, st.integers(0, 1000)),
                                                                    min_size=1, max_size=3)),
    st.tuples(st.just("end"), st.sampled_from(PRODUCERS), st.booleans()),
    st.tuples(st.just("tombstone"), tp_st),
    st.tuples(st.just("clean"), st.booleans()),
)


@example(steps=[("commit", ("g1", 0), 0), ("txn", 12, [(("g1", 0), 0)]), ("end", 12, True),
                ("tombstone", ("g1", 0))], finish=False)  # the group its pending offset made is dropped
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=1, max_size=60), finish=st.booleans())
def test_cleaning_the_offsets_partition_keeps_what_its_replay_gives(tmp_path_factory, steps, finish):
    log = UnifiedLog.open(tmp_path_factory.mktemp("o") / "__consumer_offsets-0", compact_config(segment_bytes=1024),
                          now_ms=NOW)
    open_txns: dict[int, set] = {}  # producer -> the (group, partition)s its open transaction holds
    real_now = int(time.time() * 1000)

    def append(batch: bytes) -> None:
        log.append(batch, now_ms=NOW)
        log.update_high_watermark(log.log_end_offset)

    def end(pid: int, commit: bool) -> None:
        log.append_marker(pid, 0, commit, 0, now_ms=NOW)
        log.update_high_watermark(log.log_end_offset)
        open_txns.pop(pid, None)

    def clean(past_horizon: bool) -> None:
        before = replay(log)
        Cleaner(clock=lambda: real_now + (2 * DAY if past_horizon else 0)).clean(log, 0)
        assert replay(log) == before

    try:
        for s in steps:
            if s[0] == "commit":
                (group, partition), offset = s[1], s[2]
                append(build_batch([(_key(group, partition), _value(offset), (), NOW)]))
            elif s[0] == "txn":
                pid, records = s[1], s[2]
                append(build_batch([(_key(g, p), _value(o), (), NOW) for (g, p), o in records],
                                   producer_id=pid, producer_epoch=0, is_transactional=True))
                open_txns.setdefault(pid, set()).update(tp for tp, _ in records)
            elif s[0] == "end":
                if s[1] in open_txns:
                    end(s[1], s[2])
            elif s[0] == "tombstone":
                # Also where an open transaction holds the partition: its pending offset is
                # dropped by the tombstone, as Kafka's coordinator does.
                append(build_batch([(_key(*s[1]), None, (), NOW)]))
            else:
                clean(s[1])
        if finish:
            for pid in sorted(open_txns):
                end(pid, pid % 2 == 0)
        clean(False)
        clean(True)
        before = replay(log)
        directory, hw = log.directory, log.high_watermark
        log.close()
        log = UnifiedLog.open(directory, compact_config(segment_bytes=1024), now_ms=NOW)
        log.update_high_watermark(hw)
        assert replay(log) == before
    finally:
        log.close()


def test_tombstone_inside_an_open_transaction_replays_the_same_after_cleaning(tmp_path):
    """A tombstone drops the pending offset an open transaction wrote before it (Kafka), so the
    commit marker does not bring it back, whether compaction kept the older records or not."""
    log = UnifiedLog.open(tmp_path / "__consumer_offsets-0", compact_config(segment_bytes=1024), now_ms=NOW)
    try:
        def append(batch: bytes) -> None:
            log.append(batch, now_ms=NOW)
            log.update_high_watermark(log.log_end_offset)

        append(build_batch([(_key("g1", 0), _value(1), (), NOW)]))
        append(build_batch([(_key("g1", 0), _value(5), (), NOW)], producer_id=11, producer_epoch=0,
                           is_transactional=True))
        append(build_batch([(_key("g1", 0), None, (), NOW)]))  # the partition's offsets deleted
        log.append_marker(11, 0, True, 0, now_ms=NOW)
        log.update_high_watermark(log.log_end_offset)
        for i in range(40):  # later segments: the above becomes cleanable
            append(build_batch([(_key("g2", 1), _value(i), (), NOW)]))
        before = replay(log)
        Cleaner().clean(log, 0)
        assert replay(log) == before
    finally:
        log.close()
