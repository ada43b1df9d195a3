"""The offset manager's cache in two views, both changed only by replay.

The committed view holds what the log holds below the high watermark: each offset keeps the
position in the offsets log it came from and is replaced only by a record from a later
position, so replaying any prefix of the log twice changes nothing. The latest view is the
committed one plus every record appended and not yet committed (commits and tombstones, per
partition in log order): handlers decide on it (DeleteGroups, OffsetDelete, expiry, deleted
topics), reads never see it (OffsetFetch; require_stable fetches see UNSTABLE_OFFSET_COMMIT
where it differs).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

from tidemark.records.offsets_schema import OffsetCommitValue

TopicPartition = tuple[str, int]


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    log_offset: int  # where in the offsets partition this commit was written


# A cached offset is kept packed (log offset, offset, leader epoch, commit and expire timestamps,
# then the metadata's UTF-8): about 100 bytes per offset instead of ~300 for a tuple of ints. The
# log offset comes first so that a commit packs the rest once, in its handler, and its append
# only puts the log offset in front (`PackedCommit.tail`).
_PACKED = struct.Struct(">qqiqq")
LOG_OFFSET = struct.Struct(">q")
TAIL = struct.Struct(">qiqq")  # offset, leader epoch, commit and expire timestamps


class PackedCommit(NamedTuple):
    """An offset commit record as the shard that wrote it knows it (its `OffsetsRecord.decoded`):
    the key's fields and the cached value without its log offset, so replaying the record into
    either view decodes nothing and builds no key or value objects."""

    group: str
    topic: str
    partition: int
    tail: bytes  # TAIL then the metadata's UTF-8


def pack_tail(offset: int, leader_epoch: int, metadata: bytes, commit_timestamp: int, expire_timestamp: int) -> bytes:
    return TAIL.pack(offset, leader_epoch, commit_timestamp, expire_timestamp) + metadata


def pack_value(value: OffsetCommitValue, log_offset: int) -> bytes:
    """A decoded value as the cache keeps it at `log_offset`."""
    return _PACKED.pack(log_offset, value.offset, value.leader_epoch, value.commit_timestamp,
                        value.expire_timestamp) + value.metadata.encode()


def _unpack(packed: bytes) -> CommittedOffset:
    log_offset, offset, leader_epoch, commit_timestamp, expire_timestamp = _PACKED.unpack_from(packed)
    return CommittedOffset(offset, leader_epoch, packed[_PACKED.size :].decode(), commit_timestamp,
                           expire_timestamp, log_offset)


# A v3 offset commit value (what Kafka and tidemark write without an explicit retention):
# version, offset, leader epoch, metadata length, then the metadata and the commit timestamp.
_V3_HEAD = struct.Struct(">hqih")
_V3_EMPTY = struct.Struct(">hqihq")  # the whole 24 bytes of one without metadata
_V3_TIMESTAMP = struct.Struct(">q")


def pack_v3_value(data: bytes, log_offset: int) -> bytes | None:
    """A v3 offset commit value's bytes as the cache keeps it at `log_offset`, packed straight
    from them (what `pack_value` of `decode_offset_commit_value`'s object gives); None for any
    other value (other versions, null metadata, malformed), which takes the decoding path."""
    size = len(data)
    if size < 24 or data[0] != 0 or data[1] != 3:
        return None
    if size == 24:
        _, offset, leader_epoch, metadata_length, commit_timestamp = _V3_EMPTY.unpack(data)
        if metadata_length == 0:
            return _PACKED.pack(log_offset, offset, leader_epoch, commit_timestamp, -1)
        return None
    _, offset, leader_epoch, metadata_length = _V3_HEAD.unpack_from(data)
    if metadata_length < 0 or 24 + metadata_length != size:
        return None
    metadata = data[16 : 16 + metadata_length]
    try:
        metadata.decode()  # the cache holds valid UTF-8 only (decoding such a value fails)
    except UnicodeDecodeError:
        return None
    return _PACKED.pack(log_offset, offset, leader_epoch, _V3_TIMESTAMP.unpack_from(data, 16 + metadata_length)[0],
                        -1) + metadata


FETCHED = struct.Struct(">8xqi")  # offset, leader epoch: what OffsetFetch answers, with the metadata
PACKED_SIZE = _PACKED.size  # where the metadata starts


def unpack_fetched(packed: bytes) -> tuple[int, int, str]:
    """(offset, leader epoch, metadata) of a packed offset."""
    offset, leader_epoch = FETCHED.unpack_from(packed)
    return offset, leader_epoch, packed[_PACKED.size :].decode()


def _log_offset(packed: bytes) -> int:
    return LOG_OFFSET.unpack_from(packed)[0]


_EMPTY: dict[int, bytes] = {}  # what topic_offsets answers for a topic without offsets (never changed)


class OffsetStore:
    def __init__(self) -> None:
        # group -> topic -> partition -> packed offset
        self._offsets: dict[str, dict[str, dict[int, bytes]]] = {}
        # The latest view's records above the committed view: group -> partition -> (log
        # offset, packed value or None for a tombstone), in log order.
        self._pending: dict[str, dict[TopicPartition, list[tuple[int, bytes | None]]]] = {}

    # -- replay (the only way committed state changes) ---------------------------------------

    def replay_commit(self, log_offset: int, group: str, tp: TopicPartition, value: OffsetCommitValue,
                      packed: bytes | None = None) -> None:
        """`packed`: the value as the latest view packed it at this log offset, if it did."""
        topics = self._offsets.get(group)
        if topics is None:
            topics = self._offsets[group] = {}
        partitions = topics.get(tp[0])
        if partitions is None:
            partitions = topics[tp[0]] = {}
        current = partitions.get(tp[1])
        if current is not None and _log_offset(current) >= log_offset:
            return  # already have this record or a later one
        partitions[tp[1]] = packed if packed is not None else pack_value(value, log_offset)

    def replay_own_commit(self, log_offset: int, commit: PackedCommit) -> bool:
        """The record at `log_offset`, a commit this store's shard appended, is committed: it
        leaves the latest view's pending records and the committed view takes the value packed
        when it was appended (or, if the latest view was rebuilt without it, packed now).
        Whether it was pending."""
        group, partition = commit.group, commit.partition
        was_pending, packed = self.committed(log_offset, group, (commit.topic, partition))
        if packed is None:
            packed = LOG_OFFSET.pack(log_offset) + commit.tail
        topics = self._offsets.get(group)
        if topics is None:
            topics = self._offsets[group] = {}
        partitions = topics.get(commit.topic)
        if partitions is None:
            partitions = topics[commit.topic] = {}
        current = partitions.get(partition)
        if current is None or _log_offset(current) < log_offset:
            partitions[partition] = packed
        return was_pending

    def replay_commits(self, first: int, group: str, records: Sequence[Any]) -> bool:
        """`replay_own_commit` of a whole write: `records` (`OffsetsRecord`s of `group`, whose
        `decoded` is their `PackedCommit`) at log offsets `first`, `first` + 1, ... are
        committed. Whether every one was pending."""
        pending = self._pending.get(group)
        topics = self._offsets.get(group)
        if topics is None:
            topics = self._offsets[group] = {}
        pack, unpack = LOG_OFFSET.pack, LOG_OFFSET.unpack_from
        all_pending = True
        topic, partitions = None, _EMPTY
        log_offset = first
        for record in records:
            commit = record[2]
            if commit.topic != topic:  # a commit's records come topic by topic
                topic = commit.topic
                partitions = topics.get(topic)
                if partitions is None:
                    partitions = topics[topic] = {}
            partition = commit.partition
            packed = None
            if pending:
                tp = (topic, partition)
                waiting = pending.get(tp)
                if waiting is not None and len(waiting) == 1 and waiting[0][0] == log_offset:
                    packed = waiting[0][1]  # the common case: this record alone is pending
                    del pending[tp]
                else:
                    was_pending, packed = self.committed(log_offset, group, tp)
                    all_pending = all_pending and was_pending
            else:
                all_pending = False
            if packed is None:
                packed = pack(log_offset) + commit.tail
            current = partitions.get(partition)
            if current is None or unpack(current)[0] < log_offset:
                partitions[partition] = packed
            log_offset += 1
        if pending is not None and not pending and self._pending.get(group) is pending:
            del self._pending[group]
        return all_pending

    def replay_tombstone(self, log_offset: int, group: str, tp: TopicPartition) -> None:
        topics = self._offsets.get(group)
        partitions = topics.get(tp[0]) if topics else None
        current = partitions.get(tp[1]) if partitions else None
        if current is None or _log_offset(current) >= log_offset:
            return
        del partitions[tp[1]]
        if not partitions:
            del topics[tp[0]]
            if not topics:
                del self._offsets[group]

    # -- the latest view: replay of appended records --------------------------------------

    def append_commit(self, log_offset: int, group: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        self.append_packed(log_offset, group, tp, pack_value(value, log_offset))

    def append_packed(self, log_offset: int, group: str, tp: TopicPartition, packed: bytes) -> None:
        """`packed`: the value packed at this log offset (`LOG_OFFSET` + `PackedCommit.tail`)."""
        partitions = self._pending.get(group)
        if partitions is None:
            partitions = self._pending[group] = {}
        records = partitions.get(tp)
        if records is None:
            partitions[tp] = [(log_offset, packed)]
        else:
            records.append((log_offset, packed))

    def append_commits(self, first: int, group: str, records: Sequence[Any]) -> None:
        """`append_packed` of a whole write: `records` (`OffsetsRecord`s of `group`, whose
        `decoded` is their `PackedCommit`) appended at log offsets `first`, `first` + 1, ..."""
        partitions = self._pending.get(group)
        if partitions is None:
            partitions = self._pending[group] = {}
        get, pack = partitions.get, LOG_OFFSET.pack
        log_offset = first
        for record in records:
            commit = record[2]
            tp = (commit.topic, commit.partition)
            entry = (log_offset, pack(log_offset) + commit.tail)
            waiting = get(tp)
            if waiting is None:
                partitions[tp] = [entry]
            else:
                waiting.append(entry)
            log_offset += 1

    def append_tombstone(self, log_offset: int, group: str, tp: TopicPartition) -> None:
        self._pending.setdefault(group, {}).setdefault(tp, []).append((log_offset, None))

    def committed(self, log_offset: int, group: str, tp: TopicPartition) -> tuple[bool, bytes | None]:
        """The record at `log_offset` is committed (and replayed into the committed view): it
        leaves the latest view's pending records. Whether it was one of them, and its packed
        value if it was a commit."""
        partitions = self._pending.get(group)
        records = partitions.get(tp) if partitions else None
        if not records or records[0][0] > log_offset:
            return False, None
        if len(records) == 1:  # the common case: this record alone is pending for the partition
            at, packed = records[0]
            del partitions[tp]
            if not partitions:
                del self._pending[group]
            return (True, packed) if at == log_offset else (False, None)
        was_pending, packed = False, None
        while records and records[0][0] <= log_offset:
            at, packed = records.pop(0)
            was_pending = at == log_offset
        if not records:
            del partitions[tp]
            if not partitions:
                del self._pending[group]
        return was_pending, packed if was_pending else None

    def drop_pending(self) -> None:
        """Every appended record failed: the latest view is the committed one again."""
        self._pending.clear()

    def is_pending(self, group: str, tp: TopicPartition) -> bool:
        return tp in self._pending.get(group, ())

    def has_pending(self, group: str) -> bool:
        return group in self._pending

    def latest_group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's offsets in the latest view: committed, then every appended record."""
        offsets = self.group_offsets(group)
        for tp, records in self._pending.get(group, {}).items():
            packed = records[-1][1]
            if packed is None:
                offsets.pop(tp, None)
            else:
                offsets[tp] = _unpack(packed)
        return offsets

    def latest_topic_offsets(self, topic: str) -> list[tuple[str, int]]:
        """(group, partition) of every offset of `topic` in the latest view."""
        found = {(group, partition) for group, topics in self._offsets.items() for partition in topics.get(topic, ())}
        for group, pending in self._pending.items():
            for tp, records in pending.items():
                if tp[0] == topic:
                    if records[-1][1] is None:
                        found.discard((group, tp[1]))
                    else:
                        found.add((group, tp[1]))
        return sorted(found)

    def latest_groups(self) -> set[str]:
        return set(self._offsets) | set(self._pending)

    # -- reads ----------------------------------------------------------------------------------

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        packed = self._offsets.get(group, {}).get(tp[0], {}).get(tp[1])
        return None if packed is None else _unpack(packed)

    def topic_offsets(self, group: str, topic: str) -> dict[int, bytes]:
        """Partition -> packed offset (`unpack_fetched`) of the group's offsets of a topic; not
        to be changed."""
        topics = self._offsets.get(group)
        return topics.get(topic, _EMPTY) if topics else _EMPTY

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return {(topic, partition): _unpack(packed)
                for topic, partitions in self._offsets.get(group, {}).items()
                for partition, packed in partitions.items()}

    def groups(self) -> list[str]:
        return list(self._offsets)

    def count(self) -> int:
        return sum(len(partitions) for topics in self._offsets.values() for partitions in topics.values())
