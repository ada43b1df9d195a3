"""Idempotent producer state, a simplified form of Kafka's ProducerStateManager.

Per producer id: its epoch and the metadata of its last 5 batches (Kafka's
NUM_BATCHES_TO_RETAIN, matching max.in.flight.requests.per.connection <= 5), so a retried
batch is recognised as a duplicate and answered with its original offsets.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from tidemark.records import BatchHeader

from .errors import InvalidProducerEpochError, OutOfOrderSequenceError

NUM_BATCHES_TO_RETAIN = 5
_INT32_MAX = 0x7FFFFFFF


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


class ProducerStateEntry:
    __slots__ = ("producer_id", "producer_epoch", "batches")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def is_idempotent(h: BatchHeader) -> bool:
    return h.producer_id >= 0 and h.base_sequence >= 0


def _last_seq(h: BatchHeader) -> int:
    return (h.base_sequence + h.last_offset_delta) & _INT32_MAX


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}

    def check(self, batches: list[BatchHeader]) -> BatchMetadata | None:
        """Validate the idempotent batches of one append, in order, without changing state.

        Returns the cached metadata if a batch is a duplicate of one already appended
        (the whole append is then answered from it); raises on an epoch or sequence error.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) within this append
        for h in batches:
            if not is_idempotent(h):
                continue
            first, last = h.base_sequence, _last_seq(h)
            entry = self.producers.get(h.producer_id)
            if h.producer_id in pending:
                epoch, prev_last = pending[h.producer_id]
            elif entry is not None:
                epoch, prev_last = entry.producer_epoch, entry.last_seq
                if h.producer_epoch == epoch:
                    dup = entry.find_duplicate(first, last)
                    if dup is not None:
                        return dup
            else:
                pending[h.producer_id] = (h.producer_epoch, last)  # unknown producer: any start
                continue
            if h.producer_epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {h.producer_id} epoch {h.producer_epoch} is older than {epoch}"
                )
            if h.producer_epoch > epoch:
                if first != 0:
                    raise OutOfOrderSequenceError(
                        f"producer {h.producer_id} new epoch {h.producer_epoch} starts at sequence {first}, not 0"
                    )
            elif prev_last >= 0 and first != (prev_last + 1) & _INT32_MAX:
                raise OutOfOrderSequenceError(
                    f"producer {h.producer_id} epoch {epoch}: sequence {first} after {prev_last}"
                )
            pending[h.producer_id] = (h.producer_epoch, last)
        return None

    def update(self, h: BatchHeader) -> None:
        """Record an appended batch (its header carries the assigned base offset)."""
        if not is_idempotent(h):
            return
        entry = self.producers.get(h.producer_id)
        if entry is None or entry.producer_epoch != h.producer_epoch:
            entry = self.producers[h.producer_id] = ProducerStateEntry(h.producer_id, h.producer_epoch)
        entry.batches.append(
            BatchMetadata(h.base_sequence, _last_seq(h), h.base_offset, h.base_offset + h.last_offset_delta)
        )
