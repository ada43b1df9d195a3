"""One `__consumer_offsets` partition's coordinator: its groups and their committed offsets.

Requests come in with the current time and leave as a `Result`: records to append and
responses. Persisted state has two views, as Kafka's timeline state does, and changes only by
replay. The latest view (the committed state plus every record appended and not yet committed,
in log order) is what handlers read, validate against and build their records from: the runtime
replays each record into it when it is appended (`replay_appended`). The committed view is what
reads are answered from (OffsetFetch, DescribeGroups, ListGroups, lag): the runtime replays each
record into it when the high watermark passes it (`replay`, the same path loading and a standby
follow). If appended records fail, the latest view is rebuilt from the committed one and the
records that survive (`rebuild_latest`). What Kafka keeps only in memory (who is waiting in
JoinGroup, sessions, the join and sync phases) the handlers move directly, as Kafka's classic
group coordinator does.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Container
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group import offsets as consumer_group_offsets
from tidemark.coordinator.consumer_group.group import ConsumerGroups
from tidemark.coordinator.consumer_group.heartbeat import ConsumerGroupConfig, ConsumerGroupHeartbeats
from tidemark.coordinator.group import Group, Groups, GroupState
from tidemark.coordinator.membership import GroupMembership
from tidemark.coordinator.rebalance import GroupConfig
from tidemark.coordinator.offsets import (
    _PACKED, _V3_EMPTY, FETCHED, LOG_OFFSET, PACKED_SIZE, TAIL, OffsetStore, PackedCommit, pack_tail, pack_v3_value,
    pack_value,
)
from tidemark.coordinator.result import CommitRecords, OffsetsRecord, Result, group_append_error, offset_commit_append_error
from tidemark.coordinator.timer import CoordinatorTimer
from tidemark.coordinator.txn_offsets import PackedTxnCommit, PendingTxnOffsets, TxnMarkerKey, TxnRecordKey
from tidemark.records import consumer_group_schema
from tidemark.records.consumer_group_schema import ConsumerGroupKey
from tidemark.records.offsets_schema import (
    OFFSET_COMMIT_VALUE_VERSION,
    V3_VALUE_EMPTY,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_key,
    encode_offset_commit_value,
    encode_offset_commit_value_v3,
    offset_commit_key_prefix,
)

log = structlog.get_logger("tidemark.coordinator")

NO_OFFSET = -1
_PARTITION = struct.Struct(">i")  # the partition that ends an offset commit key
_NOTHING = Result()  # what replaying most records answers (never changed: callers only read it)
RETENTION_CHECK_KEY = ("retention",)  # the shard's one periodic offsets retention check


@dataclasses.dataclass(frozen=True)
class CoordinatorConfig:
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms
    retention_ms: int = 7 * 24 * 3_600_000  # offsets.retention.minutes
    group: GroupConfig = dataclasses.field(default_factory=GroupConfig)
    consumer: ConsumerGroupConfig = dataclasses.field(default_factory=ConsumerGroupConfig)


def _retention_ms(request: Any) -> int:
    """OffsetCommit v2-v4 retention_time in ms; -1 (the default) means the broker's retention."""
    retention = getattr(request, "retention_time", None)
    return -1 if retention is None else round(retention.total_seconds() * 1000)


def _commit_timestamp(partition: Any, now_ms: int) -> int:
    """OffsetCommit v1's per-partition commit timestamp, which Kafka 0.9-2.x kept (it is where
    KIP-211's retention counts from); -1, and every other version, mean now."""
    timestamp = getattr(partition, "commit_timestamp", -1)
    return now_ms if timestamp == -1 else timestamp


def _fail_accepted_partitions(token: int, response: dict[str, Any],
                              to_error: Callable[[ErrorCode], ErrorCode]) -> Callable[[ErrorCode, int], Result]:
    """A commit's append failed: every partition it had accepted answers the append's error."""
    def failed(code: ErrorCode, _now_ms: int) -> Result:
        error = to_error(code)
        for topic_response in response["topics"]:
            for partition_response in topic_response["partitions"]:
                if partition_response["error_code"] == ErrorCode.none:
                    partition_response["error_code"] = error
        return Result().respond(token, response)

    return failed


def _txn_append_error(code: ErrorCode) -> ErrorCode:
    """How a failed append of transactional offsets reaches the producer (Kafka's
    handleOperationException): the producer's epoch errors as they are."""
    if code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced, ErrorCode.invalid_txn_state):
        return code
    if code is ErrorCode.invalid_record:
        return ErrorCode.unknown_server_error
    return offset_commit_append_error(code)


def _no_offset(partition: int, code: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """A partition without a committed offset: -1, epoch -1, metadata "" (and no error)."""
    return {"partition_index": partition, "committed_offset": NO_OFFSET, "committed_leader_epoch": -1,
            "metadata": "", "error_code": code}



def _encoded_commit(key_prefix: bytes | None, group_id: str, name: str, index: int, offset: int, leader_epoch: int,
                    metadata: str | None, raw: bytes, commit_timestamp: int, expire_timestamp: int) -> tuple[bytes, bytes]:
    """An offset commit record's key and value (OffsetCommit's and TxnOffsetCommit's): the topic's
    encoded key prefix and a v3 value built from the fields; for long names or metadata (refused
    by the checked encoders, as Kafka would) or v1 values (an expire timestamp), the checked encoders."""
    if key_prefix is not None and expire_timestamp < 0 and len(raw) <= 0x7FFF:
        return key_prefix + _PARTITION.pack(index), encode_offset_commit_value_v3(offset, leader_epoch, raw,
                                                                                 commit_timestamp)
    return (encode_key(OffsetCommitKey(group_id, name, index)),
            encode_offset_commit_value(OffsetCommitValue(offset, leader_epoch, metadata or "", commit_timestamp,
                                                         expire_timestamp)))

class _PartitionsOf:
    """A topic's partitions as a container, asking `partition_exists` per index."""

    __slots__ = ("exists", "name")

    def __init__(self, exists: Callable[[str, int], bool], name: str) -> None:
        self.exists, self.name = exists, name

    def __contains__(self, index: object) -> bool:
        return self.exists(self.name, index)  # type: ignore[arg-type]


class GroupCoordinatorShard:
    def __init__(
        self,
        partition_index: int,
        config: CoordinatorConfig,
        partition_exists: Callable[[str, int], bool],
        topic_partitions: Callable[[str], Container[int]] | None = None,
    ) -> None:
        self.partition_index = partition_index
        self.config = config
        self.partition_exists = partition_exists
        # A topic's partition indexes looked up once per topic of a commit (a container such as
        # range(count)), instead of a partition_exists call per partition; without it each
        # partition asks partition_exists.
        self.topic_partitions = topic_partitions or (lambda name: _PartitionsOf(partition_exists, name))
        self.groups = Groups()  # the latest view; reads go through its committed view
        self.offsets = OffsetStore()
        self.txn_offsets = PendingTxnOffsets()  # TxnOffsetCommit's, until their marker (txn_offsets.py)
        # Every deadline of this shard: members' sessions, groups' join/sync phases, retention.
        self.timer = CoordinatorTimer()
        self.membership = GroupMembership(self.groups, config.group, timer=self.timer)
        # KIP-848 consumer groups (coordinator/consumer_group/): their own records and views.
        self.consumer_groups = ConsumerGroups()
        self.consumer = ConsumerGroupHeartbeats(self.consumer_groups, config.consumer, self.timer,
                                                self._classic_group_kind)

    def _classic_group_kind(self, group_id: str) -> str | None:
        """Whether a classic group has this id (latest view): "empty", "active", or None."""
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return None
        return "empty" if group.state is GroupState.EMPTY and not group.members else "active"

    # -- timers ---------------------------------------------------------------------------------

    def poll(self, now_ms: int) -> Result:
        """Fire every deadline due at `now_ms` as one event."""
        return self.membership.poll(now_ms)

    def next_deadline(self) -> int | None:
        return self.timer.next_deadline()

    def activated(self, now_ms: int) -> None:
        """The shard starts serving: members' sessions restart now (as Kafka reschedules loaded
        members' heartbeats) and the retention check is armed."""
        self.membership.restart_sessions(now_ms)
        self.consumer.restart_sessions(now_ms)
        self.schedule_retention_check(now_ms, self.config.retention_check_interval_ms, self.config.retention_ms)

    def schedule_retention_check(self, now_ms: int, interval_ms: int, retention_ms: int) -> None:
        """Every offsets.retention.check.interval.ms, expire offsets (KIP-211)."""
        def check(fired_ms: int) -> Result:
            self.schedule_retention_check(fired_ms, interval_ms, retention_ms)
            return self.expire_offsets(fired_ms, retention_ms)

        self.timer.schedule(RETENTION_CHECK_KEY, now_ms + interval_ms, check)

    # -- OffsetCommit ---------------------------------------------------------------------------

    def _commit_error(self, request: Any, version: int, now_ms: int) -> ErrorCode | None:
        """The group-level reason this commit is refused (in the order Kafka's GroupCoordinatorShard checks), or None."""
        group_id = request.group_id
        if not group_id:
            return ErrorCode.invalid_group_id
        generation = request.generation_id_or_member_epoch
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return consumer_group_offsets.validate_commit(consumer_group, request.member_id, generation, version)
        group = self.groups.get(group_id)
        if group is None:
            # A standalone consumer (assign() + commit) commits to a group that does not exist
            # yet: replaying its first offset record creates it.
            if generation < 0:
                return None
            return ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation
        error = group.validate_offset_commit(request.member_id, getattr(request, "group_instance_id", None),
                                             generation)
        if error is None and generation >= 0 and group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # A classic member's commit keeps its session alive, as a heartbeat does (Kafka).
            self.membership.keep_alive(group, group.members[request.member_id], now_ms)
        return error

    def validate_commit(self, request: Any, version: int, now_ms: int) -> ErrorCode | None:
        """An OffsetCommit's group checks alone, for commits stored in ZooKeeper."""
        return self._commit_error(request, version, now_ms)

    def commit_offsets(self, request: Any, version: int, token: int, now_ms: int,
                       topic_names: Callable[[Any], str | None] = lambda t: t.name) -> Result:
        """OffsetCommit: per-partition checks, then one record per accepted partition.

        The hot path of the offset manager (a batched commit is hundreds of partitions): each
        accepted partition costs its key (the topic's encoded prefix and the partition), its v3
        value and its packed cache entry (`PackedCommit`), built straight from the request's
        fields; no key or value objects."""
        group_error = self._commit_error(request, version, now_ms)
        retention_ms = _retention_ms(request)
        expire_timestamp = now_ms + retention_ms if retention_ms >= 0 else -1
        group_id = request.group_id
        max_metadata = self.config.offset_metadata_max_bytes
        topic_partitions = self.topic_partitions
        per_partition_timestamp = version < 2  # only v1 carries a commit timestamp per partition
        records = CommitRecords(group_id)
        append = records.append
        new_tuple = tuple.__new__
        none = ErrorCode.none  # an enum member's lookup costs ~0.1-0.2 us each time (Python 3.11)
        has_epoch = version >= 6  # committed_leader_epoch (KIP-320)
        # The common partition (no metadata, no explicit retention, names short enough) is packed
        # here, without a call per field: key, v3 value and cache tail.
        pack_partition, pack_empty_value, pack_tail_head = _PARTITION.pack, V3_VALUE_EMPTY.pack, TAIL.pack
        value_version = OFFSET_COMMIT_VALUE_VERSION
        topics = []
        for topic in request.topics:
            name = topic_names(topic)
            key_prefix = offset_commit_key_prefix(group_id, name) if name is not None else None
            packs_empty = key_prefix is not None and expire_timestamp < 0
            known = topic_partitions(name) if name is not None else ()
            partitions = []
            for p in topic.partitions:
                index = p.partition_index
                code = none
                metadata = p.committed_metadata
                if index not in known:
                    code = ErrorCode.unknown_topic_or_partition
                elif group_error is not None:
                    code = group_error
                elif metadata is not None and len(metadata) > max_metadata:
                    code = ErrorCode.offset_metadata_too_large
                else:
                    offset = p.committed_offset
                    leader_epoch = p.committed_leader_epoch if has_epoch else -1
                    commit_timestamp = _commit_timestamp(p, now_ms) if per_partition_timestamp else now_ms
                    if packs_empty and not metadata:
                        key = key_prefix + pack_partition(index)  # type: ignore[operator]
                        value = pack_empty_value(value_version, offset, leader_epoch, 0, commit_timestamp)
                        tail = pack_tail_head(offset, leader_epoch, commit_timestamp, -1)
                    else:
                        raw = metadata.encode() if metadata else b""
                        key, value = _encoded_commit(key_prefix, group_id, name, index, offset, leader_epoch, metadata,
                                                     raw, commit_timestamp, expire_timestamp)
                        tail = pack_tail(offset, leader_epoch, raw, commit_timestamp, expire_timestamp)
                    # (tuples made directly: the NamedTuples' own constructors add a call each)
                    append(new_tuple(OffsetsRecord, (key, value, new_tuple(PackedCommit, (group_id, name, index, tail)))))
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": name, "topic_id": getattr(topic, "topic_id", None), "partitions": partitions})
        response = {"throttle_time": 0, "topics": topics}
        result = Result(records=records).respond(token, response)
        if records:
            # The committed view has no trace of the commit (if it commits after all, replay
            # applies it then); the latest view keeps it while it may still commit.
            result.on_failure = _fail_accepted_partitions(token, response, offset_commit_append_error)
        return result

    # -- TxnOffsetCommit and transaction markers (txn_offsets.py) -------------------------------

    def _txn_commit_error(self, request: Any) -> ErrorCode | None:
        """KIP-447's group checks of a TxnOffsetCommit (Kafka's validateOffsetCommit with
        isTransactional): a producer that names no member and no generation (v0-v2, or the
        group-id-only sendOffsetsToTransaction) may commit to a live group."""
        if not request.group_id:
            return ErrorCode.invalid_group_id
        generation = getattr(request, "generation_id", -1)
        member_id = getattr(request, "member_id", "")
        instance_id = getattr(request, "group_instance_id", None)
        group = self.groups.get(request.group_id)
        if group is None:
            return None if generation < 0 else ErrorCode.illegal_generation
        if generation < 0 and not member_id and instance_id is None and not group.is_dead:
            return ErrorCode.rebalance_in_progress if group.state is GroupState.COMPLETING_REBALANCE else None
        return group.validate_offset_commit(member_id, instance_id, generation)

    def txn_commit_offsets(self, request: Any, token: int, now_ms: int) -> Result:
        """TxnOffsetCommit: the accepted partitions' offsets as records of the producer's
        transaction, pending until its marker.

        Built as OffsetCommit's records are: each key from the topic's encoded prefix, each v3
        value straight from the request's fields, and the packed cache entry
        (`PackedTxnCommit`) replay takes; no key or value objects."""
        group_error = self._txn_commit_error(request)
        group_id = request.group_id
        max_metadata = self.config.offset_metadata_max_bytes
        topic_partitions = self.topic_partitions
        txn_key = (request.producer_id, request.producer_epoch)
        records: list[OffsetsRecord] = []
        append = records.append
        new_tuple = tuple.__new__
        none = ErrorCode.none
        topics = []
        for topic in request.topics:
            name = topic.name
            key_prefix = offset_commit_key_prefix(group_id, name)
            known = topic_partitions(name)
            partitions = []
            for p in topic.partitions:
                index = p.partition_index
                code = none
                metadata = p.committed_metadata
                if index not in known:
                    code = ErrorCode.unknown_topic_or_partition
                elif group_error is not None:
                    code = group_error
                elif metadata is not None and len(metadata) > max_metadata:
                    code = ErrorCode.offset_metadata_too_large
                else:
                    offset = p.committed_offset
                    leader_epoch = getattr(p, "committed_leader_epoch", -1)
                    raw = metadata.encode() if metadata else b""
                    key, value = _encoded_commit(key_prefix, group_id, name, index, offset, leader_epoch, metadata, raw,
                                                 now_ms, -1)
                    append(new_tuple(OffsetsRecord, (new_tuple(TxnRecordKey, (*txn_key, key, -1)), value,
                                                     new_tuple(PackedTxnCommit, (group_id, name, index, pack_tail(
                                                         offset, leader_epoch, raw, now_ms, -1))))))
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": name, "partitions": partitions})
        response = {"throttle_time": 0, "topics": topics}
        result = Result(records=records).respond(token, response)
        if records:
            result.on_failure = _fail_accepted_partitions(token, response, _txn_append_error)
        return result

    def complete_transaction(self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int,
                             token: int) -> Result:
        """WriteTxnMarkers for this offsets partition: the marker goes in the log (its epochs
        checked there) and, once replayed, commits or drops the producer's pending offsets."""
        marker = TxnMarkerKey(producer_id, producer_epoch, committed, coordinator_epoch)
        result = Result(records=[OffsetsRecord(marker, None)]).respond(token, ErrorCode.none)  # type: ignore[arg-type]
        result.on_failure = lambda code, _now_ms: Result().respond(token, code)
        return result

    def _replay_txn(self, log_offset: int, key: TxnRecordKey | TxnMarkerKey, value_bytes: bytes | None,
                    decoded: Any, now_ms: int) -> None:
        """A transaction's record or marker, committed: pending offsets wait for their marker."""
        if isinstance(key, TxnMarkerKey):
            pending = self.txn_offsets.complete(key.producer_id)
            if not key.committed:
                return
            for group_id, offsets in pending.items():
                for tp, (record_offset, packed) in offsets.items():
                    # Kafka keeps the newest commit in log order: compare the records' offsets.
                    self.offsets.replay_commit(record_offset, group_id, tp, None, packed)  # type: ignore[arg-type]
                if group_id not in self.groups:  # a standalone producer's group starts here
                    self.groups[group_id] = Group(group_id, now_ms)
            return
        if type(decoded) is PackedTxnCommit:  # this shard's own TxnOffsetCommit record
            self.txn_offsets.replay(key.producer_id, log_offset, decoded.group, (decoded.topic, decoded.partition),
                                    LOG_OFFSET.pack(log_offset) + decoded.tail)
            return
        offsets_key = decoded[0] if decoded else decode_key(key.key)
        if isinstance(offsets_key, OffsetCommitKey) and value_bytes is not None:
            value = decoded[1] if decoded else decode_offset_commit_value(value_bytes)
            self.txn_offsets.replay(key.producer_id, log_offset, offsets_key.group,
                                    (offsets_key.topic, offsets_key.partition), pack_value(value, log_offset))

    # -- OffsetFetch ----------------------------------------------------------------------------

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+'s member check for a consumer group (the committed view)."""
        return consumer_group_offsets.validate_fetch(self.consumer_groups.committed.get(group_id), member_id,
                                                     member_epoch)

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                      require_stable: bool) -> list[dict[str, Any]]:
        """Committed offsets of a group (the committed view): every requested partition (-1
        where none), or all; with require_stable, UNSTABLE_OFFSET_COMMIT where a record not yet
        committed changes a partition's offset."""
        group = self.groups.get(group_id)
        if group is not None and group.state is GroupState.DEAD:
            return [] if topics is None else [
                {"name": topic, "partitions": [_no_offset(p) for p in partitions]} for topic, partitions in topics]
        if topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(self.offsets.group_offsets(group_id)):
                wanted.setdefault(topic, []).append(partition)
            topics = list(wanted.items())
        # Whether any commit of the group is in flight (appended, or in a transaction): else
        # require_stable costs nothing per partition.
        unstable = require_stable and (self.offsets.has_pending(group_id) or self.txn_offsets.has_group(group_id))
        result = []
        none = ErrorCode.none
        unpack = FETCHED.unpack_from
        for topic, partitions in topics:
            partition_responses = []
            append = partition_responses.append
            cached = self.offsets.topic_offsets(group_id, topic)
            for partition in partitions:
                if unstable and (self.offsets.is_pending(group_id, (topic, partition))
                                 or self.txn_offsets.holds(group_id, (topic, partition))):
                    append(_no_offset(partition, ErrorCode.unstable_offset_commit))
                    continue
                packed = cached.get(partition)
                if packed is None:
                    append(_no_offset(partition))
                    continue
                offset, leader_epoch = unpack(packed)  # (unpack_fetched, inline)
                append({"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": leader_epoch,
                        "metadata": packed[PACKED_SIZE:].decode() if len(packed) > PACKED_SIZE else "",
                        "error_code": none})
            result.append({"name": topic, "partitions": partition_responses})
        return result

    # -- deletion (DeleteGroups, OffsetDelete): tombstones ------------------------------------

    def _offset_tombstones(self, group_id: str, tps: list[tuple[str, int]]) -> list[OffsetsRecord]:
        return [OffsetsRecord(encode_key(OffsetCommitKey(group_id, topic, partition)), None) for topic, partition in tps]

    def _group_tombstones(self, group: Group) -> Result:
        """Tombstones for a group and all its offsets in the latest view, commits in flight
        included (Kafka's GroupCoordinatorShard.deleteGroups). Once appended the group is being
        deleted (requests that would change it are answered as for a Dead group); it is removed
        when they are committed."""
        records = self._offset_tombstones(group.group_id, sorted(self.offsets.latest_group_offsets(group.group_id)))
        records.append(OffsetsRecord(encode_key(GroupMetadataKey(group.group_id)), None))
        return Result(records=records)

    def delete_group(self, group_id: str, token: int, now_ms: int) -> Result:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return Result().respond(token, {"group_id": group_id, "error_code": ErrorCode.non_empty_group})
            records = self._offset_tombstones(group_id, sorted(self.offsets.latest_group_offsets(group_id)))
            result = Result(records=records + self.consumer.group_tombstones(consumer_group))
            result.on_failure = lambda code, _now_ms: Result().respond(
                token, {"group_id": group_id, "error_code": group_append_error(code)})
            return result.respond(token, {"group_id": group_id, "error_code": ErrorCode.none})
        group = self.groups.get(group_id)
        error = ErrorCode.group_id_not_found if group is None else group.validate_delete_group()
        if error is not None:
            return Result().respond(token, {"group_id": group_id, "error_code": error})
        assert group is not None
        result = self._group_tombstones(group).respond(token, {"group_id": group_id, "error_code": ErrorCode.none})
        result.on_failure = lambda code, _now_ms: Result().respond(
            token, {"group_id": group_id, "error_code": group_append_error(code)})
        return result

    def delete_offsets(self, request: Any, token: int, now_ms: int) -> Result:
        """OffsetDelete (KIP-496): refused for topics a live consumer group subscribes to; of the
        others, the partitions with an offset (in the latest view) are tombstoned and answered,
        and those without one are left out of the answer, as in Kafka."""
        group_id = request.group_id
        group = self.groups.get(group_id)
        error = ErrorCode.group_id_not_found if group is None else group.validate_offset_delete()
        if error is not None:
            return Result().respond(token, {"error_code": error, "throttle_time": 0, "topics": []})
        assert group is not None
        subscribed = set() if group.state is GroupState.EMPTY else group.subscribed_topics()
        offsets = self.offsets.latest_group_offsets(group_id)
        tombstoned: list[tuple[str, int]] = []
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                if subscribed is None or topic.name in subscribed:
                    partitions.append({"partition_index": p.partition_index,
                                       "error_code": ErrorCode.group_subscribed_to_topic})
                elif (topic.name, p.partition_index) in offsets:
                    tombstoned.append((topic.name, p.partition_index))
                    partitions.append({"partition_index": p.partition_index, "error_code": ErrorCode.none})
            topics.append({"name": topic.name, "partitions": partitions})
        response = {"error_code": ErrorCode.none, "throttle_time": 0, "topics": topics}
        result = Result(records=self._offset_tombstones(group_id, tombstoned)).respond(token, response)
        result.on_failure = lambda code, _now_ms: Result().respond(
            token, {"error_code": group_append_error(code), "throttle_time": 0, "topics": []})
        return result

    def delete_topic_offsets(self, topics: list[str]) -> Result:
        """Deleted topics (Kafka's onPartitionsDeleted): a tombstone for every group's offset of
        them in the latest view (commits in flight included), so a topic created again under a
        name starts empty."""
        records = []
        for topic in topics:
            tps = self.offsets.latest_topic_offsets(topic)
            records += [OffsetsRecord(encode_key(OffsetCommitKey(group, topic, partition)), None)
                        for group, partition in tps]
            if tps:
                log.info("offsets_of_deleted_topic", partition=self.partition_index, topic=topic, offsets=len(tps))
        # No failure path: if the append fails the offsets stay, for retention to expire (Kafka too).
        return Result(records=records)

    # -- expiration (KIP-211) -----------------------------------------------------------------

    def _expiration_base(self, group: Group | None, topic: str, commit_timestamp: int) -> int | None:
        """When an offset's retention starts counting, or None while it must be kept (KIP-211)."""
        if group is None or not group.protocol_type:
            return commit_timestamp  # standalone consumers (assign() + commit): from each commit
        if group.state is GroupState.EMPTY:
            # A consumer group nobody is in: from when it became Empty (commit time if unknown).
            return group.state_timestamp_ms if group.state_timestamp_ms is not None else commit_timestamp
        if group.state is GroupState.STABLE and group.protocol_type == "consumer":
            subscribed = group.subscribed_topics()
            if subscribed is not None and topic not in subscribed:
                return commit_timestamp  # a topic the live group no longer consumes
        return None  # rebalancing, or subscriptions unknown: keep everything (KAFKA-4682)

    def expire_offsets(self, now_ms: int, retention_ms: int) -> Result:
        """The periodic offsets retention check, on the latest view (a commit in flight is the
        offset it decides on): tombstones for expired offsets, and a group tombstone for an
        Empty group left without offsets (removed when they are committed)."""
        result = Result()
        for group_id in sorted(set(self.groups) | self.offsets.latest_groups() | set(self.consumer_groups.latest)):
            group = self.groups.get(group_id)
            if group is not None and group.deleting:
                continue  # its tombstones are already written
            latest = self.offsets.latest_group_offsets(group_id)
            expired = []
            consumer_group = self.consumer_groups.get(group_id)
            for (topic, partition), entry in latest.items():
                if consumer_group is not None:
                    # KIP-848 groups (Kafka): a topic its members subscribe to keeps its offsets;
                    # others (every topic, once the group is empty) count from their commit.
                    subscribed = consumer_group.members and topic in consumer_group.subscription_metadata
                    base = None if subscribed else entry.commit_timestamp
                else:
                    base = self._expiration_base(group, topic, entry.commit_timestamp)
                if base is None or self.txn_offsets.holds(group_id, (topic, partition)):
                    # not a candidate at all, whatever retention its commit asked for; nor while an
                    # open transaction holds an offset of the partition (Kafka)
                    continue
                if entry.expire_timestamp >= 0:  # an explicit retention (OffsetCommit v2-v4)
                    if now_ms >= entry.expire_timestamp:
                        expired.append((topic, partition))
                elif now_ms - base >= retention_ms:
                    expired.append((topic, partition))
            left = len(latest) - len(expired)
            if group is not None and group.state is GroupState.EMPTY and left == 0 \
                    and not self.txn_offsets.has_group(group_id):  # an open transaction keeps it (Kafka)
                result.merge(self._group_tombstones(group))
            elif consumer_group is not None and not consumer_group.members and left == 0 \
                    and not self.txn_offsets.has_group(group_id):
                # Kafka deletes an empty consumer group once it has no offsets left, as a classic one
                result.records += self._offset_tombstones(group_id, sorted(expired)) + \
                    self.consumer.group_tombstones(consumer_group)
                log.info("consumer_group_expired", partition=self.partition_index, group=group_id)
            else:
                result.records += self._offset_tombstones(group_id, sorted(expired))
            if expired:
                log.info("offsets_expired", partition=self.partition_index, group=group_id, offsets=len(expired))
        return result

    # -- replay: the one path by which persisted state changes ----------------------------

    def replay_appended(self, log_offset: int, record: OffsetsRecord, *, now_ms: int) -> Result:
        """Apply one record this shard just appended to the latest view; returns the responses
        it completes (held requests of a static member's replaced incarnation)."""
        decoded = record.decoded
        if type(decoded) is PackedCommit:  # an OffsetCommit's record: nothing to decode
            group_id = decoded.group
            self.offsets.append_packed(log_offset, group_id, (decoded.topic, decoded.partition),
                                       LOG_OFFSET.pack(log_offset) + decoded.tail)
            if group_id not in self.groups and group_id not in self.consumer_groups:
                # a standalone consumer's group starts here
                group = self.groups[group_id] = Group(group_id, now_ms)
                group.created_at = log_offset  # not in the committed view until this commits
            return _NOTHING
        if type(decoded) is PackedTxnCommit:  # a TxnOffsetCommit's record: nothing to decode
            self.txn_offsets.append(record.key.producer_id, decoded.group, (decoded.topic, decoded.partition))
            return _NOTHING
        if isinstance(record.key, TxnRecordKey):
            key = record.decoded[0] if record.decoded else decode_key(record.key.key)
            if isinstance(key, OffsetCommitKey) and record.value is not None:
                self.txn_offsets.append(record.key.producer_id, key.group, (key.topic, key.partition))
            return _NOTHING
        if isinstance(record.key, TxnMarkerKey):
            return _NOTHING  # its effect reaches the views when it commits (replay)
        key = record.decoded[0] if record.decoded else decode_key(record.key)
        if isinstance(key, OffsetCommitKey):
            tp = (key.topic, key.partition)
            if record.value is None:
                self.offsets.append_tombstone(log_offset, key.group, tp)
            else:
                value = record.decoded[1] if record.decoded else decode_offset_commit_value(record.value)
                self.offsets.append_commit(log_offset, key.group, tp, value)
                if key.group not in self.groups and key.group not in self.consumer_groups:
                    # a standalone consumer's group starts here
                    group = self.groups[key.group] = Group(key.group, now_ms)
                    group.created_at = log_offset  # not in the committed view until this commits
        elif isinstance(key, GroupMetadataKey):
            value = None if record.value is None else (record.decoded[1] if record.decoded else
                                                       decode_group_metadata_value(record.value))
            return self.membership.replay_group_appended(log_offset, key.group, value, now_ms)
        elif isinstance(key, (ConsumerGroupKey, UnknownKey)):
            decoded = record.decoded or self._consumer_group_record(key, record.key, record.value)
            if decoded is not None:
                self.consumer_groups.replay_appended(log_offset, decoded[0], decoded[1])
        return _NOTHING

    def replay_appended_commits(self, first: int, records: CommitRecords, *, now_ms: int) -> Result:
        """`replay_appended` of an OffsetCommit's whole write (at log offsets `first`, ...)."""
        group_id = records.group
        self.offsets.append_commits(first, group_id, records)
        if group_id not in self.groups and group_id not in self.consumer_groups:
            group = self.groups[group_id] = Group(group_id, now_ms)  # a standalone consumer's group starts here
            group.created_at = first  # not in the committed view until this commits
        return _NOTHING

    def replay_commits(self, first: int, records: CommitRecords, *, now_ms: int) -> Result:
        """`replay` of an OffsetCommit's whole write, committed (at log offsets `first`, ...)."""
        groups = self.groups
        end = first + len(records)
        if end > groups.committed_to:
            groups.committed_to = end
        group_id = records.group
        if not self.offsets.replay_commits(first, group_id, records):
            # some were not in the latest view (rebuilt since): as any record
            if group_id not in groups and group_id not in self.consumer_groups:
                groups[group_id] = Group(group_id, now_ms)
        return _NOTHING

    @staticmethod
    def _consumer_group_record(key: Any, key_bytes: bytes, value_bytes: bytes | None) -> tuple[Any, Any] | None:
        """A KIP-848 record (types 3..8) decoded, or None for a record type this shard skips."""
        if isinstance(key, UnknownKey) and key.version not in consumer_group_schema.RECORD_TYPES:
            return None
        cg_key = consumer_group_schema.decode_key(key_bytes)
        value = None if value_bytes is None else consumer_group_schema.decode_value(cg_key.record_type, value_bytes)
        return cg_key, value

    def rebuild_latest(self, surviving: list[tuple[int, OffsetsRecord]], now_ms: int) -> Result:
        """Appended records failed: the latest view becomes the committed one plus the records
        that survive (in log order)."""
        self.offsets.drop_pending()
        self.consumer_groups.rebuild_latest()
        self.txn_offsets.drop_appended()
        result = self.membership.drop_appended(now_ms)
        for group_id, group in list(self.groups.items()):
            if group.created_at is not None and group.created_at >= self.groups.committed_to \
                    and not group.members and not group.pending_members:
                del self.groups[group_id]  # made only by a commit that failed
        for log_offset, record in surviving:
            result.merge(self.replay_appended(log_offset, record, now_ms=now_ms))
        return result

    def replay(self, log_offset: int, key_bytes: bytes | None, value_bytes: bytes | None, *,
               now_ms: int, decoded: tuple[Any, Any] | None = None) -> Result:
        """Apply one committed record, whoever wrote it, to the committed view (and to the
        latest view too unless it was appended here); returns the responses it completes
        (SyncGroup requests held for the group's assignment). `decoded` is the record's (key,
        value) already decoded, when the caller has it."""
        groups = self.groups
        if log_offset >= groups.committed_to:
            groups.committed_to = log_offset + 1
        if type(decoded) is PackedCommit:  # this shard's own offset commit
            if not self.offsets.replay_own_commit(log_offset, decoded):
                group_id = decoded.group  # not in the latest view (rebuilt since): as any record
                if group_id not in groups and group_id not in self.consumer_groups:
                    groups[group_id] = Group(group_id, now_ms)
            return _NOTHING
        if key_bytes is None:
            return Result()
        if isinstance(key_bytes, (TxnRecordKey, TxnMarkerKey)):
            self._replay_txn(log_offset, key_bytes, value_bytes, decoded, now_ms)
            return Result()
        key = decoded[0] if decoded else decode_key(key_bytes)
        if isinstance(key, OffsetCommitKey):
            tp = (key.topic, key.partition)
            appended, packed = self.offsets.committed(log_offset, key.group, tp)
            if value_bytes is None:
                self.offsets.replay_tombstone(log_offset, key.group, tp)
                self.txn_offsets.drop_partition(key.group, tp)
            elif packed is not None:  # as the latest view took it when it was appended
                self.offsets.replay_commit(log_offset, key.group, tp, None, packed)  # type: ignore[arg-type]
            else:
                value = decoded[1] if decoded else decode_offset_commit_value(value_bytes)
                self.offsets.replay_commit(log_offset, key.group, tp, value)
                if not appended and key.group not in self.groups and key.group not in self.consumer_groups:
                    # a standalone consumer's group starts here
                    self.groups[key.group] = Group(key.group, now_ms)
        elif isinstance(key, GroupMetadataKey):
            value = None if value_bytes is None else (decoded[1] if decoded else
                                                      decode_group_metadata_value(value_bytes))
            return self.membership.replay_group(key.group, value, now_ms, log_offset)
        elif isinstance(key, ConsumerGroupKey) or (isinstance(key, UnknownKey)
                                                   and key.version in consumer_group_schema.RECORD_TYPES):
            record = decoded if isinstance(key, ConsumerGroupKey) else \
                self._consumer_group_record(key, key_bytes, value_bytes)
            assert record is not None
            self.consumer_groups.replay(log_offset, record[0], record[1])
        elif isinstance(key, UnknownKey):
            log.warning("offsets_record_skipped", partition=self.partition_index, offset=log_offset,
                        key_version=key.version)
        return Result()

    def replay_chunk(self, chunk: list[tuple[int, Any, bytes | None]], *, now_ms: int) -> Result:
        """`replay` of each record of a chunk read back from the log (a standby following its
        leader, a leader replaying an earlier leadership's tail), in log order; the merged
        Result.

        A batched commit on a follower is hundreds of offset commit records: those whose key
        decodes on the fast path (version 0 or 1) and whose value is a v3 value (or a tombstone)
        are replayed here without key or value objects, the value packed straight from its
        bytes, and (group, topic) and its cache dict looked up once per run of keys sharing
        them. Anything else (group metadata, transactional records and markers, KIP-848
        records, other value versions, a group with records of this shard's own pending)
        takes `replay` in its place in the log."""
        result = Result()
        groups, consumer_groups, txn_offsets = self.groups, self.consumer_groups, self.txn_offsets
        store = self.offsets
        offsets, pending = store._offsets, store._pending
        replay, pack_value_bytes, pack_empty = self.replay, pack_v3_value, _PACKED.pack
        unpack_empty, unpack_log_offset, unpack_partition = _V3_EMPTY.unpack, LOG_OFFSET.unpack_from, _PARTITION.unpack_from
        # The run being replayed: its key prefix (all but the partition), group, topic, the
        # topic's partitions in the committed view (None until a commit needs them made) and
        # whether the group is known to exist. Reset by anything that may change them.
        prefix, group_id, topic, partitions, group_checked = None, "", "", None, False
        last = -1  # the last record replayed here (a chunk's offsets ascend): committed_to follows it
        for log_offset, key, value in chunk:
            if type(key) is bytes and (size := len(key)) >= 10:
                if prefix is None or key[:-4] != prefix:
                    prefix = None
                    # decode_key's fast path, as is: anything it does not take is `replay`'s
                    if key[0] == 0 and key[1] <= 1 and key[2] < 0x80:
                        topic_at = 4 + ((key[2] << 8) | key[3])
                        if topic_at + 2 <= size and key[topic_at] < 0x80 and \
                                topic_at + 6 + ((key[topic_at] << 8) | key[topic_at + 1]) == size:
                            try:
                                group_id, topic = key[4:topic_at].decode(), key[topic_at + 2 : size - 4].decode()
                            except UnicodeDecodeError:
                                pass
                            else:
                                if not pending or group_id not in pending:
                                    prefix, group_checked = key[:-4], False
                                    topics = offsets.get(group_id)
                                    partitions = topics.get(topic) if topics else None
                if prefix is not None:
                    partition = unpack_partition(key, size - 4)[0]
                    if value is None:  # a tombstone
                        last = log_offset
                        if partitions is not None:
                            current = partitions.get(partition)
                            if current is not None and unpack_log_offset(current)[0] < log_offset:
                                store.replay_tombstone(log_offset, group_id, (topic, partition))
                                prefix = None  # the topic's (and group's) dict may be gone
                        if txn_offsets.committed:
                            txn_offsets.drop_partition(group_id, (topic, partition))
                        continue
                    if len(value) == 24 and (fields := unpack_empty(value))[0] == 3 and fields[3] == 0:
                        packed = pack_empty(log_offset, fields[1], fields[2], fields[4], -1)
                    else:
                        packed = pack_value_bytes(value, log_offset)
                    if packed is not None:
                        last = log_offset
                        if partitions is None:
                            topics = offsets.get(group_id)
                            if topics is None:
                                topics = offsets[group_id] = {}
                            partitions = topics.get(topic)
                            if partitions is None:
                                partitions = topics[topic] = {}
                        current = partitions.get(partition)
                        if current is None or unpack_log_offset(current)[0] < log_offset:
                            partitions[partition] = packed
                        if not group_checked:
                            if group_id not in groups and group_id not in consumer_groups:
                                groups[group_id] = Group(group_id, now_ms)  # a standalone consumer's group starts here
                            group_checked = True
                        continue
            # Anything else: as one record, in its place (it may change what the run holds).
            if last >= groups.committed_to:
                groups.committed_to = last + 1
            done = replay(log_offset, key, value, now_ms=now_ms)
            if done.responses or done.records or done.on_failure is not None:
                result.merge(done)
            prefix = None
        if last >= groups.committed_to:
            groups.committed_to = last + 1
        return result

    def unloaded(self, now_ms: int) -> Result:
        """The shard is being unloaded: answer every held request NOT_COORDINATOR."""
        result = Result()
        for group_id in list(self.groups):
            result.merge(self.membership.remove_group(group_id, now_ms))
        return result


