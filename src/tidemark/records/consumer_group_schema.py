"""The KIP-848 consumer group records of `__consumer_offsets`, byte-compatible with Kafka 4.x.

A key is an int16 record type then the group id (and the member id for per-member records), as
int16-length strings (keys are never flexible). A value is an int16 version (0 for all of them)
then its fields in the flexible encoding: compact strings and arrays (length + 1 as an unsigned
varint), uuids as 16 bytes, a tagged-field section after every struct. Kafka's record types:

* 3 ConsumerGroupMetadata (group): the group epoch.
* 4 ConsumerGroupPartitionMetadata (group): the subscribed topics' ids, names and partition counts.
* 5 ConsumerGroupMemberMetadata (group, member): the member's subscription and client details.
* 6 ConsumerGroupTargetAssignmentMetadata (group): the target assignment's epoch.
* 7 ConsumerGroupTargetAssignmentMember (group, member): the member's target partitions.
* 8 ConsumerGroupCurrentMemberAssignment (group, member): its epochs, state and partitions.

A tombstone (null value) deletes what its key names. Tagged fields newer Kafka versions add
(MetadataHash, ClassicMemberMetadata, ...) are skipped when read and never written.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass, field

from tidemark.records.offsets_schema import _Reader, _Writer

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
RECORD_TYPES = range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)
_PER_MEMBER = (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT)
_VALUE_VERSION = 0

# topic id -> partitions, the shape of every assignment in these records
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A consumer group record's key: its type (3..8), group and (types 5, 7, 8) member."""

    record_type: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:  # type 3
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:  # type 4
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:  # type 5
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:  # type 6
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:  # type 7
    partitions: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:  # type 8
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)


# -- keys ------------------------------------------------------------------------------------


def encode_key(key: ConsumerGroupKey) -> bytes:
    w = _Writer(key.record_type)
    w.string(key.group)
    if key.record_type in _PER_MEMBER:
        w.string(key.member_id or "")
    return bytes(w.out)


def decode_key(data: bytes) -> ConsumerGroupKey:
    r = _Reader(data, "consumer group record key")
    record_type = r.int16()
    if record_type not in RECORD_TYPES:
        raise ValueError(f"malformed consumer group record key: record type {record_type} is not 3..8")
    group = r.string()
    member_id = r.string() if record_type in _PER_MEMBER else None
    r.end()
    return ConsumerGroupKey(record_type, group, member_id)


# -- values ----------------------------------------------------------------------------------


def _uuid(w: _Writer, value: uuid.UUID) -> None:
    w.out += value.bytes


def _read_uuid(r: _Reader) -> uuid.UUID:
    return uuid.UUID(bytes=r._take(16))


def _write_assignment(w: _Writer, assignment: Assignment) -> None:
    w.array_length(len(assignment))
    for topic_id, partitions in sorted(assignment.items(), key=lambda item: str(item[0])):
        _uuid(w, topic_id)
        w.array_length(len(partitions))
        for partition in sorted(partitions):
            w.int32(partition)
        w.tagged_fields()


def _read_assignment(r: _Reader) -> Assignment:
    assignment = {}
    for _ in range(r.array_length()):
        topic_id = _read_uuid(r)
        assignment[topic_id] = frozenset(r.int32() for _ in range(r.array_length()))
        r.skip_tagged_fields()
    return assignment


def encode_value(record_type: int, value: object) -> bytes:
    w = _Writer(_VALUE_VERSION, flexible=True)
    if isinstance(value, GroupMetadataValue):
        w.int32(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        w.array_length(len(value.topics))
        for topic in value.topics:
            _uuid(w, topic.topic_id)
            w.string(topic.name)
            w.int32(topic.num_partitions)
            w.array_length(0)  # PartitionMetadata (racks): none, as Kafka writes without racks
            w.tagged_fields()
    elif isinstance(value, MemberMetadataValue):
        w.string(value.instance_id, nullable=True)
        w.string(value.rack_id, nullable=True)
        w.string(value.client_id)
        w.string(value.client_host)
        w.array_length(len(value.subscribed_topic_names))
        for name in value.subscribed_topic_names:
            w.string(name)
        w.string(value.subscribed_topic_regex, nullable=True)
        w.int32(value.rebalance_timeout_ms)
        w.string(value.server_assignor, nullable=True)
    elif isinstance(value, TargetAssignmentMetadataValue):
        w.int32(value.assignment_epoch)
    elif isinstance(value, TargetAssignmentMemberValue):
        _write_assignment(w, value.partitions)
    elif isinstance(value, CurrentMemberAssignmentValue):
        w.int32(value.member_epoch)
        w.int32(value.previous_member_epoch)
        w.out += bytes([value.state & 0xFF])
        _write_assignment(w, value.assigned)
        _write_assignment(w, value.pending_revocation)
    else:
        raise TypeError(f"not a consumer group record value: {type(value).__name__}")
    w.tagged_fields()
    return bytes(w.out)


def decode_value(record_type: int, data: bytes) -> object:
    r = _Reader(data, f"consumer group record value (type {record_type})")
    version = r.int16()
    if version != _VALUE_VERSION:
        raise ValueError(f"malformed consumer group record value: unknown version {version}")
    r.flexible = True
    value: object
    if record_type == GROUP_METADATA:
        value = GroupMetadataValue(r.int32())
    elif record_type == PARTITION_METADATA:
        topics = []
        for _ in range(r.array_length()):
            topic_id = _read_uuid(r)
            name = r.string()
            num_partitions = r.int32()
            for _ in range(r.array_length()):  # racks per partition: not used
                r.int32()
                for _ in range(r.array_length()):
                    r.string()
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            topics.append(TopicMetadata(topic_id, name, num_partitions))
        value = PartitionMetadataValue(tuple(topics))
    elif record_type == MEMBER_METADATA:
        instance_id = r.string(nullable=True)
        rack_id = r.string(nullable=True)
        client_id = r.string()
        client_host = r.string()
        names = tuple(r.string() for _ in range(r.array_length()))
        regex = r.string(nullable=True)
        rebalance_timeout_ms = r.int32()
        server_assignor = r.string(nullable=True)
        value = MemberMetadataValue(instance_id, rack_id, client_id, client_host, names, regex,
                                    rebalance_timeout_ms, server_assignor)
    elif record_type == TARGET_ASSIGNMENT_METADATA:
        value = TargetAssignmentMetadataValue(r.int32())
    elif record_type == TARGET_ASSIGNMENT_MEMBER:
        value = TargetAssignmentMemberValue(_read_assignment(r))
    elif record_type == CURRENT_MEMBER_ASSIGNMENT:
        member_epoch = r.int32()
        previous = r.int32()
        state = r._take(1)[0]
        state = state - 256 if state > 127 else state
        value = CurrentMemberAssignmentValue(member_epoch, previous, state, _read_assignment(r), _read_assignment(r))
    else:
        raise ValueError(f"not a consumer group record type: {record_type}")
    r.skip_tagged_fields()
    r.end()
    return value


def _plain(obj: object) -> object:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, frozenset | set):
        return sorted(obj)  # type: ignore[type-var]
    if isinstance(obj, tuple | list):
        return [_plain(v) for v in obj]
    if isinstance(obj, uuid.UUID):
        return str(obj)
    return obj


def to_json(record: object) -> str:
    """Compact JSON of a key or value (uuids as strings, partitions as sorted lists), for the
    offsets dump and the Spark source."""
    return json.dumps(_plain(record), separators=(",", ":"), ensure_ascii=False)
