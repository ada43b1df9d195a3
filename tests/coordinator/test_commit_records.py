"""An OffsetCommit's records, built on the handler's fast path, are the bytes the reference
encoders write, and replaying them from what the shard kept (`PackedCommit`) leaves the same
state as replaying them decoded from those bytes (a standby, a load)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from tidemark.coordinator.offsets import PackedCommit
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.records.offsets_schema import _Writer
from tidemark.wire.build import build
from tidemark.wire.offsets_v0 import OffsetCommitV0Partition, OffsetCommitV0Request, OffsetCommitV0Topic

NOW = 1_700_000_000_000
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
NAMES = st.text(min_size=1, max_size=40)
PARTITIONS = st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1), "committed_offset": INT64, "committed_leader_epoch": INT32,
    "commit_timestamp": st.sampled_from([-1, 0]) | INT64,
    "committed_metadata": st.none() | st.text(max_size=30)}), min_size=1, max_size=8,
    unique_by=lambda p: p["partition_index"])
COMMIT = st.fixed_dictionaries({
    "version": st.integers(1, 9), "group": NAMES, "retention": st.sampled_from([-1, -1, 0, 60_000]),
    "topics": st.lists(st.tuples(NAMES, PARTITIONS), min_size=1, max_size=3, unique_by=lambda t: t[0])})


def reference_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer(1)  # offset commit key v1: the checked writer, field by field
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.out)


def reference_value(offset: int, leader_epoch: int, metadata: str, commit_timestamp: int, expire: int) -> bytes:
    version = 1 if expire >= 0 else 3  # what Kafka writes
    w = _Writer(version)
    w.int64(offset)
    if version == 3:
        w.int32(leader_epoch)
    w.string(metadata)
    w.int64(commit_timestamp)
    if version == 1:
        w.int64(expire)
    return bytes(w.out)


def request(commit: dict):
    version = commit["version"]
    if version == 1:  # written by hand, not kio's
        return OffsetCommitV0Request(group_id=commit["group"], topics=tuple(
            OffsetCommitV0Topic(name, tuple(OffsetCommitV0Partition(
                p["partition_index"], p["committed_offset"], p["committed_metadata"], p["commit_timestamp"])
                for p in partitions)) for name, partitions in commit["topics"]))
    return build(load_request_schema(8, version), {
        "group_id": commit["group"], "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time": commit["retention"],
        "topics": [{"name": name, "partitions": [{k: v for k, v in p.items() if k != "commit_timestamp"}  # v1's alone
                                                 for p in partitions]} for name, partitions in commit["topics"]]})


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda _topic, _partition: True)


@settings(max_examples=150, deadline=None)
@given(commit=COMMIT)
def test_commit_records_are_the_reference_encoders_bytes(commit):
    version = commit["version"]
    result = new_shard().commit_offsets(request(commit), version, 1, NOW)
    expire = NOW + commit["retention"] if 2 <= version <= 4 and commit["retention"] >= 0 else -1
    expected = []
    for name, partitions in commit["topics"]:
        for p in partitions:
            timestamp = p["commit_timestamp"] if version == 1 and p["commit_timestamp"] != -1 else NOW
            epoch = p["committed_leader_epoch"] if version >= 6 else -1
            expected.append((reference_key(commit["group"], name, p["partition_index"]),
                             reference_value(p["committed_offset"], epoch, p["committed_metadata"] or "",
                                             timestamp, expire)))
    assert [(r.key, r.value) for r in result.records] == expected
    assert all(type(r.decoded) is PackedCommit for r in result.records)


def fetched(shard: GroupCoordinatorShard, commit: dict) -> list:
    wanted = [(name, [p["partition_index"] for p in partitions]) for name, partitions in commit["topics"]]
    return shard.fetch_offsets(commit["group"], wanted, True)


@settings(max_examples=100, deadline=None)
@given(commits=st.lists(COMMIT.map(lambda c: {**c, "group": "g"}), min_size=1, max_size=4))
def test_replaying_own_records_equals_replaying_their_bytes(commits):
    writer, reader = new_shard(), new_shard()
    offset = 0
    for commit in commits:
        records = writer.commit_offsets(request(commit), commit["version"], 1, NOW).records
        for record in records:
            writer.replay_appended(offset, record, now_ms=NOW)
            offset += 1
        for at, record in enumerate(records, start=offset - len(records)):
            writer.replay(at, record.key, record.value, now_ms=NOW, decoded=record.decoded)
            reader.replay(at, record.key, record.value, now_ms=NOW)  # as a standby or a load does
    for commit in commits:
        assert fetched(writer, commit) == fetched(reader, commit)
    assert writer.offsets.group_offsets("g") == reader.offsets.group_offsets("g")
    assert not writer.offsets.has_pending("g")


def test_a_record_replayed_after_the_latest_view_was_rebuilt_is_taken_from_its_bytes():
    shard = new_shard()
    commit = {"version": 8, "group": "g", "retention": -1,
              "topics": [("t", [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 2,
                                 "commit_timestamp": -1, "committed_metadata": "m"}])]}
    (record,) = shard.commit_offsets(request(commit), 8, 1, NOW).records
    shard.replay_appended(0, record, now_ms=NOW)
    shard.rebuild_latest([], NOW)  # the append failed, then committed after all
    shard.replay(0, record.key, record.value, now_ms=NOW, decoded=record.decoded)
    (topic,) = fetched(shard, commit)
    assert [(p["committed_offset"], p["committed_leader_epoch"], p["metadata"]) for p in topic["partitions"]] == [
        (5, 2, "m")]
    assert "g" in shard.groups


def _state(shard: GroupCoordinatorShard) -> tuple:
    """Both views and the groups, as replay leaves them."""
    return (shard.offsets._offsets, shard.offsets._pending, shard.groups.committed_to,
            {group_id: group.created_at for group_id, group in shard.groups.items()})


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.tuples(
    COMMIT.map(lambda c: {**c, "group": "g"}),
    st.integers(0, 3),  # then this many of the oldest writes commit
    st.sampled_from([None, None, "none survive", "all survive"])),  # then writes fail, rebuilding the latest view
    min_size=1, max_size=6))
def test_replaying_a_commit_write_whole_equals_replaying_it_record_by_record(steps):
    """The runtime replays an OffsetCommit's write in one pass per view: with writes in flight on
    the same partitions, the latest view rebuilt with or without them, the state after every step
    is record-by-record replay's."""
    whole, each = new_shard(), new_shard()
    pending: list[tuple[int, list]] = []  # writes appended and not yet committed
    end = 0
    for commit, committing, rebuild in steps:
        records = whole.commit_offsets(request(commit), commit["version"], 1, NOW).records
        assert records == each.commit_offsets(request(commit), commit["version"], 1, NOW).records
        if records:
            whole.replay_appended_commits(end, records, now_ms=NOW)
            for at, record in enumerate(records, start=end):
                each.replay_appended(at, record, now_ms=NOW)
            pending.append((end, records))
            end += len(records)
        if rebuild is not None:
            surviving = [] if rebuild == "none survive" else [
                (at, record) for first, written in pending for at, record in enumerate(written, start=first)]
            whole.rebuild_latest(surviving, NOW)
            each.rebuild_latest(surviving, NOW)
        for first, written in pending[:committing]:
            whole.replay_commits(first, written, now_ms=NOW)
            for at, record in enumerate(written, start=first):
                each.replay(at, record.key, record.value, now_ms=NOW, decoded=record.decoded)
        del pending[:committing]
        assert _state(whole) == _state(each)
