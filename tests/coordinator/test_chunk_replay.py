"""A chunk read back from the offsets log (a standby following its leader, a leader replaying an
earlier leadership's tail) replayed whole (`replay_chunk`: runs of offset commits without key or
value objects) leaves the shard exactly as replaying its records one by one (`replay`, the
sequential model): both views of the offsets, their log offsets, the groups (standalone
consumers' made by a commit, classic groups' records, KIP-848 groups), transactional offsets
pending and committed by their markers, how far the log is committed, and the responses."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tidemark.coordinator.result import OffsetsRecord, Result
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.coordinator.txn_offsets import TxnMarkerKey, TxnRecordKey
from tidemark.records import consumer_group_schema
from tidemark.records.offsets_schema import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitValue,
    _Writer,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
    GroupMetadataKey,
)

NOW = 1_700_000_000_000
GROUPS = ("g1", "grüppe")
TOPICS = ("t", "tópico")
PRODUCERS = (7, 8)


def commit_key(version: int, group: str, topic: str, partition: int) -> bytes:
    w = _Writer(version)  # offset commit keys v0 and v1: the same fields
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.out)


def v3_null_metadata(offset: int, leader_epoch: int, commit_timestamp: int) -> bytes:
    """A v3 value whose metadata is null (length -1): decoded as "", never packed straight."""
    w = _Writer(3)
    w.int64(offset)
    w.int32(leader_epoch)
    w.string(None, nullable=True)
    w.int64(commit_timestamp)
    return bytes(w.out)


offsets_ = st.integers(-1, 2**40)
epochs = st.integers(-1, 5)
metadata = st.sampled_from(["", "", "", "m", "métadonnée"])
timestamps = st.sampled_from([NOW, NOW + 1, -1])


@st.composite
def commit_values(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["v3", "v3", "v3", "v3", "v1", "v0", "v2", "v4", "null"]))
    offset, epoch, meta, ts = draw(offsets_), draw(epochs), draw(metadata), draw(timestamps)
    if kind == "v3":
        return encode_offset_commit_value(OffsetCommitValue(offset, epoch, meta, ts))
    if kind == "v1":  # an explicit retention (OffsetCommit v2-v4)
        return encode_offset_commit_value(OffsetCommitValue(offset, -1, meta, ts, draw(st.sampled_from([0, NOW]))))
    if kind == "null":
        return v3_null_metadata(offset, epoch, ts)
    return encode_offset_commit_value(OffsetCommitValue(offset, epoch, meta, ts, NOW), version=int(kind[1]))


def group_value(draw: Any) -> bytes:
    members = draw(st.sampled_from([(), ("m1",), ("m1", "m2")]))
    protocol = draw(st.sampled_from(["range", None])) if not members else "range"
    return encode_group_metadata_value(GroupMetadataValue(
        protocol_type=draw(st.sampled_from(["consumer", ""])), generation=draw(st.integers(0, 3)),
        protocol=protocol, leader=members[0] if members else None,
        current_state_timestamp=draw(st.sampled_from([-1, NOW])),
        members=tuple(MemberMetadata(m, None, "client", "/127.0.0.1", 30_000, 10_000, b"", b"") for m in members)))


@st.composite
def log_records(draw: Any) -> list[Any]:
    """A log as the reader hands it back, without offsets yet: (key, value) where the key is
    bytes, None, or (for transactions) a function of the record's offset."""
    def tp() -> tuple[str, str, int]:
        return draw(st.sampled_from(GROUPS)), draw(st.sampled_from(TOPICS)), draw(st.integers(-1, 2))

    records: list[Any] = []
    for kind in draw(st.lists(st.sampled_from(
            ["run", "run", "run", "commit", "commit", "tombstone", "tombstone", "group", "txn", "marker",
             "consumer_group", "unknown", "no_key"]), max_size=30)):
        if kind == "run":  # a batched commit: one group, topic by topic
            group, version = draw(st.sampled_from(GROUPS)), draw(st.sampled_from([1, 1, 1, 0]))
            for topic in draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=2, unique=True)):
                for partition in draw(st.lists(st.integers(-1, 4), min_size=1, max_size=6, unique=True)):
                    value = draw(st.sampled_from([None, "empty"]) | commit_values())
                    if value == "empty":
                        value = encode_offset_commit_value(OffsetCommitValue(draw(offsets_), draw(epochs), "", NOW))
                    records.append((commit_key(version, group, topic, partition), value))
        elif kind == "commit":
            records.append((commit_key(draw(st.sampled_from([0, 1])), *tp()), draw(commit_values())))
        elif kind == "tombstone":
            records.append((commit_key(draw(st.sampled_from([0, 1])), *tp()), None))
        elif kind == "group":
            group = draw(st.sampled_from(GROUPS))
            records.append((encode_key(GroupMetadataKey(group)), group_value(draw) if draw(st.booleans()) else None))
        elif kind == "txn":
            producer, key = draw(st.sampled_from(PRODUCERS)), commit_key(1, *tp())
            value = draw(st.none() | commit_values())
            records.append(((lambda at, producer=producer, key=key: TxnRecordKey(producer, 0, key, at)), value))
        elif kind == "marker":
            producer, committed = draw(st.sampled_from(PRODUCERS)), draw(st.booleans())
            records.append(((lambda at, producer=producer, committed=committed:
                             TxnMarkerKey(producer, 0, committed, 0, at)), None))
        elif kind == "consumer_group":  # a KIP-848 group's record
            key = consumer_group_schema.encode_key(consumer_group_schema.ConsumerGroupKey(
                consumer_group_schema.GROUP_METADATA, "cg"))
            value = draw(st.none() | st.integers(0, 5).map(lambda epoch: consumer_group_schema.encode_value(
                consumer_group_schema.GROUP_METADATA, consumer_group_schema.GroupMetadataValue(epoch))))
            records.append((key, value))
        elif kind == "unknown":  # a record type this shard skips
            records.append((b"\x00\x63" + b"\x00" * 8, b"x"))
        else:
            records.append((None, b"x"))
    return records


def placed(records: list[Any], first: int = 0) -> list[tuple[int, Any, bytes | None]]:
    return [(at, key(at) if callable(key) else key, value) for at, (key, value) in enumerate(records, start=first)]


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda _topic, _partition: True)


def state(shard: GroupCoordinatorShard) -> dict[str, Any]:
    """Everything replay may change, both views."""
    groups = shard.groups
    return {
        "offsets": shard.offsets._offsets,
        "pending": shard.offsets._pending,
        "committed_to": groups.committed_to,
        "groups": {group_id: (group.state, group.state_timestamp_ms, group.created_at, group.deleting,
                              group.to_metadata_value()) for group_id, group in groups.items()},
        "deleting": sorted(groups.deleting),
        "committed_groups": sorted(group.group_id for group in groups.committed_groups()),
        "consumer_groups": (sorted(shard.consumer_groups.latest), sorted(shard.consumer_groups.committed),
                            {g: vars(group) if hasattr(group, "__dict__") else repr(group)
                             for g, group in shard.consumer_groups.committed.items()}),
        "txn": (shard.txn_offsets.committed, shard.txn_offsets.appended),
        "timers": {key: deadline for key, (_, deadline, _) in shard.timer._live.items()},
    }


def appended(shard: GroupCoordinatorShard, records: list[Any], first: int) -> None:
    """A leader's own writes, above the tail it replays, in its latest view."""
    for at, (key, value) in enumerate(records, start=first):
        shard.replay_appended(at, OffsetsRecord(key, value), now_ms=NOW)


def responses(result: Result) -> dict[int, Any]:
    return result.responses


@settings(max_examples=400, deadline=None)
@given(records=log_records(), splits=st.lists(st.integers(0, 200), max_size=6),
       own=st.lists(st.tuples(st.sampled_from(GROUPS), st.sampled_from(TOPICS), st.integers(-1, 3),
                              st.none() | commit_values()), max_size=4))
def test_a_chunk_replayed_whole_leaves_the_shard_as_replaying_each_record(records, splits, own):
    log = placed(records)
    # the leader case: its own appended writes above the tail (none: a standby)
    own_records = [(commit_key(1, group, topic, partition), value) for group, topic, partition, value in own]
    whole, each = new_shard(), new_shard()
    appended(whole, own_records, len(log))
    appended(each, own_records, len(log))
    model = Result()
    for at, key, value in log:
        model.merge(each.replay(at, key, value, now_ms=NOW))
    got = Result()
    cuts = sorted({0, len(log), *(cut for cut in splits if cut < len(log))})
    for start, end in zip(cuts, cuts[1:]):
        got.merge(whole.replay_chunk(log[start:end], now_ms=NOW))
    assert state(whole) == state(each)
    assert responses(got) == responses(model)
    # and replaying the log again (a chunk read twice) changes nothing either way
    whole.replay_chunk(log, now_ms=NOW)
    for at, key, value in log:
        each.replay(at, key, value, now_ms=NOW)
    assert state(whole) == state(each)


def test_a_batched_commit_replays_without_a_record_by_record_replay():
    """The common chunk (a batched commit of v3 values, empty or with metadata, and tombstones)
    takes no `replay` call, and ends as one would."""
    records = [(commit_key(1, "g", topic, partition),
                encode_offset_commit_value(OffsetCommitValue(100 + partition, 3, "m" if partition == 2 else "", NOW)))
               for topic in ("a", "b") for partition in range(4)]
    records.append((commit_key(1, "g", "a", 0), None))
    chunk = placed(records, first=10)
    whole, each = new_shard(), new_shard()
    for at, key, value in chunk:
        each.replay(at, key, value, now_ms=NOW)

    def no_replay(*_args: Any, **_kwargs: Any) -> Result:
        raise AssertionError("a batched commit took the record-by-record path")

    whole.replay = no_replay  # type: ignore[method-assign]
    whole.replay_chunk(chunk, now_ms=NOW)
    assert state(whole) == state(each)
    assert whole.offsets.get("g", ("a", 1)).offset == 101
    assert whole.offsets.get("g", ("b", 2)).metadata == "m"
    assert whole.offsets.get("g", ("a", 0)) is None
    assert whole.groups.committed_to == 19 and "g" in whole.groups


def test_a_tombstone_in_a_run_drops_the_offsets_a_transaction_wrote_before_it():
    """A transaction's offset for a partition, then a batched write with that partition's
    tombstone among commits of others, then the transaction's COMMIT marker: as Kafka, the
    transaction's offset does not come back, whether the chunk is replayed whole or one by one."""
    key = commit_key(1, "g", "t", 0)
    records = [((lambda at: TxnRecordKey(7, 0, key, at)), encode_offset_commit_value(OffsetCommitValue(50, -1, "", NOW))),
               (commit_key(1, "g", "t", 1), encode_offset_commit_value(OffsetCommitValue(11, -1, "", NOW))),
               (key, None),
               (commit_key(1, "g", "t", 2), encode_offset_commit_value(OffsetCommitValue(12, -1, "", NOW))),
               ((lambda at: TxnMarkerKey(7, 0, True, 0, at)), None)]
    chunk = placed(records)
    whole, each = new_shard(), new_shard()
    for at, record_key, value in chunk:
        each.replay(at, record_key, value, now_ms=NOW)
    whole.replay_chunk(chunk, now_ms=NOW)
    assert state(whole) == state(each)
    assert whole.offsets.get("g", ("t", 0)) is None
    assert [whole.offsets.get("g", ("t", p)).offset for p in (1, 2)] == [11, 12]
