"""Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) in the offsets log.

A transactional commit is written as ordinary offset commit records in a transactional batch
of the producer (its id and epoch), and stays pending, invisible to OffsetFetch, until the
transaction's marker lands in the same offsets partition: COMMIT makes each pending offset the
committed one unless a commit written later in the log replaced it meanwhile (Kafka compares
the records' log offsets: compaction keeps the newest), ABORT drops them. OffsetFetch with
require_stable answers UNSTABLE_OFFSET_COMMIT for a partition a transaction holds an offset of,
and KIP-211 expiry never sees pending offsets (they are not committed yet).

The runtime's records carry no batch, so the writer and reader mark what needs one: a record
whose key is a `TxnRecordKey` goes into (and comes back from) a transactional batch of that
producer, and a `TxnMarkerKey` is a transaction marker (a control batch, no offsets record).
Read back from the log, each carries its own log offset, so loading (which keeps the last record
per key) keeps every transactional record and marker, in log order.
"""

from __future__ import annotations

from typing import NamedTuple

TopicPartition = tuple[str, int]


class TxnRecordKey(NamedTuple):
    """An offsets record (its encoded key in `key`) written in a producer's transaction."""

    producer_id: int
    producer_epoch: int
    key: bytes
    offset: int = -1  # the log offset, when read back from the log


class PackedTxnCommit(NamedTuple):
    """A TxnOffsetCommit record as the shard that wrote it knows it (its `OffsetsRecord.decoded`,
    as `PackedCommit` is an OffsetCommit's): the key's fields and the cached value without its
    log offset, so replaying it into either view decodes nothing and builds no objects."""

    group: str
    topic: str
    partition: int
    tail: bytes  # offsets.pack_tail's: offset, leader epoch, timestamps, then the metadata


class TxnMarkerKey(NamedTuple):
    """A transaction's COMMIT or ABORT marker in the offsets partition."""

    producer_id: int
    producer_epoch: int
    committed: bool
    coordinator_epoch: int
    offset: int = -1


class PendingTxnOffsets:
    """The transactional offsets awaiting their marker, per producer id.

    `committed`: records below the high watermark (replayed), group -> partition -> (log
    offset, the value packed as the offsets cache keeps it); `appended`: (group, partition) of records appended and not yet
    committed, so require_stable sees a transaction as soon as it wrote."""

    def __init__(self) -> None:
        self.committed: dict[int, dict[str, dict[TopicPartition, tuple[int, bytes]]]] = {}
        self.appended: dict[int, set[tuple[str, TopicPartition]]] = {}

    def append(self, producer_id: int, group: str, tp: TopicPartition) -> None:
        self.appended.setdefault(producer_id, set()).add((group, tp))

    def drop_appended(self) -> None:
        self.appended.clear()

    def replay(self, producer_id: int, log_offset: int, group: str, tp: TopicPartition, value: bytes) -> None:
        """A committed transactional record: `value` packed at `log_offset` (offsets.pack_value)."""
        offsets = self.committed.setdefault(producer_id, {}).setdefault(group, {})
        current = offsets.get(tp)
        if current is None or current[0] < log_offset:
            offsets[tp] = (log_offset, value)
        appended = self.appended.get(producer_id)
        if appended is not None:
            appended.discard((group, tp))
            if not appended:
                del self.appended[producer_id]

    def drop_partition(self, group: str, tp: TopicPartition) -> None:
        """A tombstone of the group's partition committed: as Kafka, the offsets open transactions
        wrote for it before the tombstone are dropped (a later commit marker does not bring them
        back), so a replay gives the same whether compaction kept the older records or not."""
        for groups in self.committed.values():
            offsets = groups.get(group)
            if offsets is not None and offsets.pop(tp, None) is not None and not offsets:
                del groups[group]

    def complete(self, producer_id: int) -> dict[str, dict[TopicPartition, tuple[int, bytes]]]:
        """The producer's transaction ended: its pending offsets, removed."""
        self.appended.pop(producer_id, None)
        return self.committed.pop(producer_id, {})

    def holds(self, group: str, tp: TopicPartition) -> bool:
        """Whether some transaction holds an offset of this partition for this group."""
        return any(tp in groups.get(group, ()) for groups in self.committed.values()) or \
            any((group, tp) in pending for pending in self.appended.values())

    def has_group(self, group: str) -> bool:
        return any(group in groups for groups in self.committed.values()) or \
            any(g == group for pending in self.appended.values() for g, _ in pending)

    def producers(self) -> list[int]:
        return sorted(set(self.committed) | set(self.appended))
