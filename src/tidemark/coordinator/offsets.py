"""The offset manager's cache: committed offsets per group, loaded and updated only by replay.

Each cached offset keeps the position in the offsets log it came from and is replaced only by a
record from a later position, so replaying any prefix of the log twice changes nothing
(Redpanda's group_stm does the same). Commits appended but not yet committed are tracked as
pending: they are invisible to OffsetFetch until replayed, and require_stable fetches see
UNSTABLE_OFFSET_COMMIT for them.
"""

from __future__ import annotations

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


class OffsetStore:
    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self._pending: dict[str, Counter[TopicPartition]] = {}

    # -- replay (the only way committed state changes) ---------------------------------------

    def replay_commit(self, log_offset: int, group: str, tp: TopicPartition, value: OffsetCommitValue) -> None:
        offsets = self._offsets.setdefault(group, {})
        current = offsets.get(tp)
        if current is not None and current.log_offset >= log_offset:
            return  # already have this record or a later one
        offsets[tp] = CommittedOffset(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp,
                                      value.expire_timestamp, log_offset)

    def replay_tombstone(self, log_offset: int, group: str, tp: TopicPartition) -> None:
        offsets = self._offsets.get(group)
        if offsets is None:
            return
        current = offsets.get(tp)
        if current is not None and current.log_offset < log_offset:
            del offsets[tp]
            if not offsets:
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

    def is_pending(self, group: str, tp: TopicPartition) -> bool:
        return tp in self._pending.get(group, ())

    def has_pending(self, group: str) -> bool:
        return group in self._pending

    # -- reads ----------------------------------------------------------------------------------

    def get(self, group: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._offsets.get(group, {}).get(tp)

    def group_offsets(self, group: str) -> dict[TopicPartition, CommittedOffset]:
        return self._offsets.get(group, {})

    def groups(self) -> list[str]:
        return list(self._offsets)

    def count(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())
