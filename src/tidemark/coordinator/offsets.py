"""The offset manager's cache: committed offsets per group, loaded and updated only by replay.

Each cached offset keeps the position in the offsets log it came from and is replaced only by a
record from a later position, so replaying any prefix of the log twice changes nothing
(Redpanda's group_stm does the same). Commits appended but not yet committed are tracked as
pending: they are invisible to OffsetFetch until replayed, and require_stable fetches see
UNSTABLE_OFFSET_COMMIT for them.
"""

from __future__ import annotations

import struct
from collections import Counter
from typing import NamedTuple

from tidemark.records.offsets_schema import OffsetCommitValue

TopicPartition = tuple[str, int]


class CommittedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    log_offset: int  # where in the offsets partition this commit was written


# A cached offset is kept packed (offset, log offset, leader epoch, commit and expire timestamps,
# then the metadata's UTF-8): about 100 bytes per offset instead of ~300 for a tuple of ints.
_PACKED = struct.Struct(">qqiqq")


def _pack(value: OffsetCommitValue, log_offset: int) -> bytes:
    return _PACKED.pack(value.offset, log_offset, value.leader_epoch, value.commit_timestamp,
                        value.expire_timestamp) + value.metadata.encode()


def _unpack(packed: bytes) -> CommittedOffset:
    offset, log_offset, leader_epoch, commit_timestamp, expire_timestamp = _PACKED.unpack_from(packed)
    return CommittedOffset(offset, leader_epoch, packed[_PACKED.size :].decode(), commit_timestamp,
                           expire_timestamp, log_offset)


def _log_offset(packed: bytes) -> int:
    return _PACKED.unpack_from(packed)[1]


class OffsetStore:
    def __init__(self) -> None:
        # group -> topic -> partition -> packed offset
        self._offsets: dict[str, dict[str, dict[int, bytes]]] = {}
        self._pending: dict[str, Counter[TopicPartition]] = {}

    # -- replay (the only way committed state changes) ---------------------------------------

    def replay_commit(self, log_offset: int, group: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        partitions = self._offsets.setdefault(group, {}).setdefault(tp[0], {})
        current = partitions.get(tp[1])
        if current is not None and _log_offset(current) >= log_offset:
            return  # already have this record or a later one
        partitions[tp[1]] = _pack(value, log_offset)

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

    # -- pending commits ----------------------------------------------------------------------

    def add_pending(self, group: str, tps: list[TopicPartition]) -> None:
        self._pending.setdefault(group, Counter()).update(tps)

    def remove_pending(self, group: str, tps: list[TopicPartition]) -> None:
        pending = self._pending.get(group)
        if pending is None:
            return
        pending.subtract(tps)
        for tp in tps:
            if pending[tp] <= 0:
                del pending[tp]
        if not pending:
            del self._pending[group]

    def remove_one_pending(self, group: str, tp: TopicPartition) -> None:
        """The replay of one committed record: cheaper than remove_pending for the hot path."""
        pending = self._pending.get(group)
        if pending is None or tp not in pending:
            return
        if pending[tp] > 1:
            pending[tp] -= 1
            return
        del pending[tp]
        if not pending:
            del self._pending[group]

    def is_pending(self, group: str, tp: TopicPartition) -> bool:
        return tp in self._pending.get(group, ())

    def has_pending(self, group: str) -> bool:
        return group in self._pending

    # -- reads ----------------------------------------------------------------------------------

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        packed = self._offsets.get(group, {}).get(tp[0], {}).get(tp[1])
        return None if packed is None else _unpack(packed)

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return {(topic, partition): _unpack(packed)
                for topic, partitions in self._offsets.get(group, {}).items()
                for partition, packed in partitions.items()}

    def topic_offsets(self, topic: str) -> list[tuple[str, int]]:
        """(group, partition) of every offset of `topic`, committed or in flight."""
        found = {(group, partition) for group, topics in self._offsets.items() for partition in topics.get(topic, ())}
        found.update((group, tp[1]) for group, pending in self._pending.items() for tp in pending if tp[0] == topic)
        return sorted(found)

    def groups(self) -> list[str]:
        return list(self._offsets)

    def count(self) -> int:
        return sum(len(partitions) for topics in self._offsets.values() for partitions in topics.values())
