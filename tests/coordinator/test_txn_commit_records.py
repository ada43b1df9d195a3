"""A TxnOffsetCommit's records, built as OffsetCommit's are (no key or value objects), are the
bytes the reference encoders write, in a transactional record of the producer; and replaying
them from what the shard kept (`PackedTxnCommit`) leaves the same pending and, after the marker,
committed offsets as replaying them decoded from those bytes (a standby, a load)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema

from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.coordinator.txn_offsets import PackedTxnCommit, TxnMarkerKey, TxnRecordKey
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.build import build

from tests.coordinator.test_commit_records import INT32, INT64, NAMES, reference_key, reference_value

NOW = 1_700_000_000_000
PARTITIONS = st.lists(st.fixed_dictionaries({
    "partition_index": st.integers(0, 2**31 - 1), "committed_offset": INT64, "committed_leader_epoch": INT32,
    "committed_metadata": st.none() | st.text(max_size=30)}), min_size=1, max_size=8,
    unique_by=lambda p: p["partition_index"])
COMMIT = st.fixed_dictionaries({
    "version": st.integers(0, 3), "group": NAMES, "producer_id": st.integers(0, 2**40),
    "producer_epoch": st.integers(0, 2**15 - 1),
    "topics": st.lists(st.tuples(NAMES, PARTITIONS), min_size=1, max_size=3, unique_by=lambda t: t[0])})


def request(commit: dict):
    return build(load_request_schema(ApiKey.TXN_OFFSET_COMMIT, commit["version"]), {
        "transactional_id": "tx", "group_id": commit["group"], "producer_id": commit["producer_id"],
        "producer_epoch": commit["producer_epoch"], "generation_id": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in commit["topics"]]})


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda _topic, _partition: True)


@settings(max_examples=150, deadline=None)
@given(commit=COMMIT)
def test_txn_commit_records_are_the_reference_encoders_bytes(commit):
    result = new_shard().txn_commit_offsets(request(commit), 1, NOW)
    expected = []
    for name, partitions in commit["topics"]:
        for p in partitions:
            epoch = p["committed_leader_epoch"] if commit["version"] >= 2 else -1
            expected.append((TxnRecordKey(commit["producer_id"], commit["producer_epoch"],
                                          reference_key(commit["group"], name, p["partition_index"])),
                             reference_value(p["committed_offset"], epoch, p["committed_metadata"] or "", NOW, -1)))
    assert [(r.key, r.value) for r in result.records] == expected
    assert all(type(r.key) is TxnRecordKey and type(r.decoded) is PackedTxnCommit for r in result.records)


def fetched(shard: GroupCoordinatorShard, commit: dict) -> list:
    wanted = [(name, [p["partition_index"] for p in partitions]) for name, partitions in commit["topics"]]
    return shard.fetch_offsets(commit["group"], wanted, True)


@settings(max_examples=100, deadline=None)
@given(commits=st.lists(COMMIT.map(lambda c: {**c, "group": "g", "producer_id": 7, "producer_epoch": 0}),
                        min_size=1, max_size=4),
       committed=st.booleans())
def test_replaying_own_txn_records_equals_replaying_their_bytes(commits, committed):
    writer, reader = new_shard(), new_shard()
    offset = 0
    for commit in commits:
        records = writer.txn_commit_offsets(request(commit), 1, NOW).records
        for record in records:
            writer.replay_appended(offset, record, now_ms=NOW)
            offset += 1
        for at, record in enumerate(records, start=offset - len(records)):
            writer.replay(at, record.key, record.value, now_ms=NOW, decoded=record.decoded)
            # as a standby or a load reads it back: the key carries its log offset
            reader.replay(at, record.key._replace(offset=at), record.value, now_ms=NOW)
    assert writer.txn_offsets.committed == reader.txn_offsets.committed
    for commit in commits:  # pending: UNSTABLE_OFFSET_COMMIT on both
        assert fetched(writer, commit) == fetched(reader, commit)
    marker = TxnMarkerKey(7, 0, committed, 0, offset)
    for shard in (writer, reader):
        shard.replay(offset, marker, None, now_ms=NOW)
    for commit in commits:
        assert fetched(writer, commit) == fetched(reader, commit)
    assert writer.offsets.group_offsets("g") == reader.offsets.group_offsets("g")
    assert bool(writer.offsets.group_offsets("g")) == committed
