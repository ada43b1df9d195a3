"""Transactional offset commits in the group shard: pending until the marker's replay, invisible
to OffsetFetch, UNSTABLE_OFFSET_COMMIT for require_stable, kept from expiry, and the same state
whether replayed as written or loaded (last record per key) from the log."""

from __future__ import annotations

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.coordinator.txn_offsets import TxnMarkerKey, TxnRecordKey
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

NOW = 1_700_000_000_000
TP = ("t", 0)


def _shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: topic == "t")


def _txn_request(pid: int, offset: int, *, generation: int = -1, member_id: str = "", instance_id=None):
    return build(load_request_schema(ApiKey.TXN_OFFSET_COMMIT, 3), {
        "transactional_id": "tx", "group_id": "g", "producer_id": pid, "producer_epoch": 0,
        "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})


class Log:
    """The shard's offsets partition: records are appended (latest view) and committed (replay)."""

    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self.shard = shard
        self.records: list[tuple[object, bytes | None]] = []  # (key as the reader gives it, value)

    def write(self, result, *, commit: bool = True) -> None:
        for record in result.records:
            offset = len(self.records)
            self.shard.replay_appended(offset, record, now_ms=NOW)
            key = record.key._replace(offset=offset) if isinstance(record.key, (TxnRecordKey, TxnMarkerKey)) \
                else record.key
            self.records.append((key, record.value))
            if commit:
                self.shard.replay(offset, record.key, record.value, now_ms=NOW, decoded=record.decoded)

    def plain_commit(self, offset: int) -> None:
        key, value = OffsetCommitKey("g", *TP), OffsetCommitValue(offset, -1, "", NOW, -1)
        from tidemark.coordinator.result import OffsetsRecord
        self.write(type("R", (), {"records": [OffsetsRecord(encode_key(key), encode_offset_commit_value(value),
                                                                (key, value))]}))

    def loaded(self) -> GroupCoordinatorShard:
        """A fresh shard loaded as the runtime loads: the last record per key, in log order."""
        latest: dict[object, tuple[int, bytes | None]] = {}
        for offset, (key, value) in enumerate(self.records):
            latest.pop(key, None)
            latest[key] = (offset, value)
        shard = _shard()
        for key, (offset, value) in latest.items():
            shard.replay(offset, key, value, now_ms=NOW)
        return shard


def _fetched(shard: GroupCoordinatorShard, require_stable: bool = False) -> tuple[int, ErrorCode]:
    [topic] = shard.fetch_offsets("g", [("t", [0])], require_stable)
    [partition] = topic["partitions"]
    return partition["committed_offset"], partition["error_code"]


def _marker(pid: int, committed: bool):
    return _shard().complete_transaction(pid, 0, committed, 0, token=1)


def test_pending_until_commit_marker_then_visible():
    shard = _shard()
    log = Log(shard)
    result = shard.txn_commit_offsets(_txn_request(7, 10), token=1, now_ms=NOW)
    assert result.responses[1]["topics"][0]["partitions"][0]["error_code"] == ErrorCode.none
    log.write(result, commit=False)
    assert _fetched(shard, True) == (-1, ErrorCode.unstable_offset_commit)  # appended, not committed
    log.shard.replay(0, log.records[0][0], log.records[0][1], now_ms=NOW)
    assert _fetched(shard) == (-1, ErrorCode.none)  # committed record, open transaction: invisible
    assert _fetched(shard, True) == (-1, ErrorCode.unstable_offset_commit)
    log.write(_marker(7, True))
    assert _fetched(shard, True) == (10, ErrorCode.none)
    assert _fetched(log.loaded(), True) == (10, ErrorCode.none)


def test_abort_drops_and_a_newer_plain_commit_wins_over_an_older_transactional_one():
    shard = _shard()
    log = Log(shard)
    log.plain_commit(1)
    log.write(shard.txn_commit_offsets(_txn_request(7, 10), token=1, now_ms=NOW))
    log.write(_marker(7, False))
    assert _fetched(shard, True) == (1, ErrorCode.none)
    log.write(shard.txn_commit_offsets(_txn_request(7, 20), token=1, now_ms=NOW))  # record at 3
    log.plain_commit(30)  # written after it in the log
    log.write(_marker(7, True))  # the transactional record is older: the plain commit stays
    assert _fetched(shard, True) == (30, ErrorCode.none)
    # Loading keeps every transactional record and marker (they are keyed by log offset).
    loaded = log.loaded()
    assert _fetched(loaded, True) == (30, ErrorCode.none)
    # Two transactions of one producer on one key: the first committed, the second aborted.
    log.write(shard.txn_commit_offsets(_txn_request(8, 40), token=1, now_ms=NOW))
    log.write(_marker(8, True))
    log.write(shard.txn_commit_offsets(_txn_request(8, 50), token=1, now_ms=NOW))
    log.write(_marker(8, False))
    assert _fetched(shard, True) == (40, ErrorCode.none)
    assert _fetched(log.loaded(), True) == (40, ErrorCode.none)


def test_open_transaction_survives_load_and_expiry_keeps_the_group():
    shard = _shard()
    log = Log(shard)
    log.plain_commit(1)
    log.write(shard.txn_commit_offsets(_txn_request(7, 10), token=1, now_ms=NOW))
    loaded = log.loaded()
    assert _fetched(loaded, True) == (-1, ErrorCode.unstable_offset_commit)
    # Expiry (KIP-211) deletes neither the pending offset nor, as Kafka, the committed offset of a
    # partition an open transaction holds, nor the group under them.
    expired = loaded.expire_offsets(NOW + 10**12, retention_ms=1)
    keys = [r.key for r in expired.records]
    assert encode_key(OffsetCommitKey("g", *TP)) not in keys
    assert all(not key.startswith(b"\x00\x02") for key in keys if isinstance(key, bytes))  # no group tombstone
    loaded_log = Log(loaded)
    loaded_log.records = list(log.records)
    loaded_log.write(expired)
    loaded_log.write(_marker(7, True))
    assert _fetched(loaded, True) == (10, ErrorCode.none)


def test_kip_447_group_checks():
    shard = _shard()
    log = Log(shard)

    def code(request) -> ErrorCode:
        result = shard.txn_commit_offsets(request, token=1, now_ms=NOW)
        return result.responses[1]["topics"][0]["partitions"][0]["error_code"]

    assert code(_txn_request(7, 1, generation=3, member_id="m")) == ErrorCode.illegal_generation  # no group
    log.write(shard.txn_commit_offsets(_txn_request(7, 1), token=1, now_ms=NOW))
    log.write(_marker(7, True))
    assert code(_txn_request(7, 2, generation=0, member_id="m")) == ErrorCode.unknown_member_id
    assert code(_txn_request(7, 2, generation=0, member_id="m", instance_id="i")) == ErrorCode.unknown_member_id
    assert code(_txn_request(7, 2)) == ErrorCode.none  # no member, no generation: accepted
    unknown_topic = build(load_request_schema(ApiKey.TXN_OFFSET_COMMIT, 0), {
        "transactional_id": "tx", "group_id": "g", "producer_id": 7, "producer_epoch": 0,
        "topics": [{"name": "nope", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                    "committed_metadata": ""}]}]})
    assert code(unknown_topic) == ErrorCode.unknown_topic_or_partition


def test_kip_447_checks_against_a_live_group():
    from tidemark.coordinator.group import GroupState

    shard = _shard()
    log = Log(shard)
    log.write(shard.txn_commit_offsets(_txn_request(7, 1), token=1, now_ms=NOW))
    log.write(_marker(7, True))
    group = shard.groups["g"]
    # A Stable generation 3 with static member "i" as "m" (set directly: the checks only read these).
    group.members["m"] = object()  # type: ignore[assignment]
    group.static_members["i"] = "m"
    group.generation = 3
    group.state = GroupState.STABLE

    def code(**kw) -> ErrorCode:
        result = shard.txn_commit_offsets(_txn_request(7, 2, **kw), token=1, now_ms=NOW)
        return result.responses[1]["topics"][0]["partitions"][0]["error_code"]

    assert code(generation=3, member_id="m", instance_id="i") == ErrorCode.none
    assert code(generation=2, member_id="m", instance_id="i") == ErrorCode.illegal_generation
    assert code(generation=3, member_id="old", instance_id="i") == ErrorCode.fenced_instance_id
    assert code(generation=3, member_id="x") == ErrorCode.unknown_member_id
    assert code() == ErrorCode.none  # transactional: a live group takes a commit naming no member
