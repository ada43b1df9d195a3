"""One transactional id's state and its transitions (Kafka's TransactionMetadata), pure.

Each transition returns a new `TransactionMetadata`: the shard writes it as a record, and the
state changes only when that record is replayed. `last_producer_id`/`last_producer_epoch` are
kept in memory only, as in Kafka (transaction log value v0 has no place for them): a retried
InitProducerId after a coordinator move is fenced instead of answered again.
"""

from __future__ import annotations

import dataclasses

from tidemark.records.transaction_log_schema import TransactionLogValue, TransactionStatus

__all__ = ["NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "TransactionMetadata", "VALID_PREVIOUS", "epoch_exhausted"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

S = TransactionStatus

# Kafka's validPreviousStates: the states a transaction may move to each state from.
VALID_PREVIOUS: dict[TransactionStatus, frozenset[TransactionStatus]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# States in which an idle transactional id may expire (transactional.id.expiration.ms).
EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """Kafka rotates the producer id before the epoch can overflow (fencing adds one more)."""
    return epoch >= SHORT_MAX - 1


class IllegalTransition(AssertionError):
    """A transition Kafka's table forbids: a coordinator bug."""


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionStatus
    partitions: frozenset[tuple[str, int]]
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    # -- the record ----------------------------------------------------------------------------

    def to_value(self) -> TransactionLogValue:
        grouped: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            grouped.setdefault(topic, []).append(partition)
        partitions = None if self.state is S.EMPTY else tuple((t, tuple(ids)) for t, ids in grouped.items())
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, partitions,
                                   self.last_update_timestamp_ms, self.start_timestamp_ms)

    @classmethod
    def from_value(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        partitions = frozenset() if value.status is S.EMPTY or value.partitions is None else frozenset(
            (topic, p) for topic, ids in value.partitions for p in ids)
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                   value.status, partitions, value.start_timestamp_ms, value.last_update_timestamp_ms)

    # -- transitions -------------------------------------------------------------------------

    def _to(self, state: TransactionStatus, **changes) -> TransactionMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        return dataclasses.replace(self, state=state, **changes)

    def bump_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TransactionMetadata | None:
        """InitProducerId on a finished transaction: the next epoch (Empty), or the current one
        again for a retry of a bump that succeeded (the expected epoch is the last one); None
        when the expected epoch is neither (PRODUCER_FENCED). KIP-360."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self._to(S.EMPTY, producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                        partitions=frozenset(), start_timestamp_ms=-1, last_update_timestamp_ms=now_ms)

    def rotate_producer_id(self, producer_id: int, timeout_ms: int, now_ms: int,
                           record_last_epoch: bool) -> TransactionMetadata:
        """The epoch is exhausted: a new producer id at epoch 0."""
        return self._to(S.EMPTY, producer_id=producer_id, producer_epoch=0, last_producer_id=self.producer_id,
                        last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                        timeout_ms=timeout_ms, partitions=frozenset(), start_timestamp_ms=-1,
                        last_update_timestamp_ms=now_ms)

    def add_partitions(self, partitions: frozenset[tuple[str, int]], now_ms: int) -> TransactionMetadata:
        starting = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        return self._to(S.ONGOING, partitions=self.partitions | partitions,
                        start_timestamp_ms=now_ms if starting else self.start_timestamp_ms,
                        last_update_timestamp_ms=now_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> TransactionMetadata:
        return self._to(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, last_update_timestamp_ms=now_ms)

    def fence_and_abort(self, now_ms: int) -> TransactionMetadata:
        """An Ongoing transaction aborted by the coordinator (a new producer's InitProducerId, or
        its timeout): the epoch is bumped so the old producer is fenced, and never handed out."""
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransition(f"{self.transactional_id}: cannot fence epoch {SHORT_MAX}")
        fenced = self._to(S.PREPARE_EPOCH_FENCE, producer_epoch=self.producer_epoch + 1,
                          last_producer_epoch=NO_PRODUCER_EPOCH)
        return fenced._to(S.PREPARE_ABORT, last_update_timestamp_ms=now_ms)

    def complete(self, now_ms: int) -> TransactionMetadata:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._to(state, partitions=frozenset(), last_update_timestamp_ms=now_ms)

    def dead(self) -> TransactionMetadata:
        return self._to(S.DEAD, partitions=frozenset())
