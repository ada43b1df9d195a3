"""The transaction coordinator's shard: one `__transaction_state` partition's transactional ids
(Kafka's TransactionStateManager and TransactionCoordinator decisions for them).

Like the group shard it keeps two views: the **latest** (committed plus every record appended and
not yet committed, in log order) and the **committed** (what the log holds below the high
watermark). A transactional id whose latest record is not committed yet has a transition in
flight: Kafka's `pendingState`, answered CONCURRENT_TRANSACTIONS where Kafka answers it. Handlers
decide on the latest view and return records; state changes only by replay. Reads
(DescribeTransactions, ListTransactions, the partition verification of KIP-890) answer from the
committed view.

Once a PrepareCommit or PrepareAbort is committed on a serving shard, the transaction is handed
to the marker sender (`on_prepared`), which writes the markers and comes back with
`complete_transaction`; at activation every transaction left prepared is handed over again, as
Kafka's load does.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.result import OffsetsRecord, Result, group_append_error
from tidemark.coordinator.transactions.state import (
    EXPIRABLE,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    epoch_exhausted,
)
from tidemark.records.transaction_log_schema import (
    TransactionStatus,
    decode_transaction_key,
    decode_transaction_value,
    encode_transaction_key,
    encode_transaction_value,
)

__all__ = ["NEEDS_PRODUCER_ID", "TransactionConfig", "TransactionShard"]

S = TransactionStatus
PREPARED = (S.PREPARE_COMMIT, S.PREPARE_ABORT)


class _NeedsProducerId:
    """InitProducerId's answer when the transition needs a fresh producer id: the handler
    allocates one (possibly from ZooKeeper, off the shard's queue) and asks again with it."""

    def __repr__(self) -> str:
        return "NEEDS_PRODUCER_ID"


NEEDS_PRODUCER_ID = _NeedsProducerId()


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_check_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expiration_check_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms


# (log offset, metadata; None for a tombstone in the latest view)
Entry = tuple[int, TransactionMetadata | None]


class TransactionShard:
    def __init__(self, index: int, config: TransactionConfig,
                 on_prepared: Callable[[int, TransactionMetadata], None] | None = None,
                 on_committed: Callable[[str], None] | None = None) -> None:
        self.index = index
        self.config = config
        self.on_prepared = on_prepared
        self.on_committed = on_committed  # told each id whose record became durable
        self.committed: dict[str, Entry] = {}
        self.latest: dict[str, Entry] = {}
        self.active = False
        self._abort_check_at: int | None = None
        self._expiration_check_at: int | None = None

    # -- the views ---------------------------------------------------------------------------

    def current(self, transactional_id: str) -> TransactionMetadata | None:
        """The latest view's state of the id (what a handler decides on)."""
        entry = self.latest.get(transactional_id)
        return entry[1] if entry is not None else None

    def pending(self, transactional_id: str) -> bool:
        """A record of the id is appended and not committed yet (Kafka's pending transition)."""
        latest, committed = self.latest.get(transactional_id), self.committed.get(transactional_id)
        return (latest[0] if latest else -1) != (committed[0] if committed else -1)

    def committed_state(self, transactional_id: str) -> TransactionMetadata | None:
        entry = self.committed.get(transactional_id)
        return entry[1] if entry is not None else None

    @staticmethod
    def _decode(key: bytes, value: bytes | None, decoded: tuple[Any, Any] | None) -> tuple[str | None, Any]:
        if decoded is not None:
            return decoded
        transactional_id = decode_transaction_key(key)
        if transactional_id is None or value is None:
            return transactional_id, None
        return transactional_id, TransactionMetadata.from_value(transactional_id, decode_transaction_value(value))

    def replay_appended(self, log_offset: int, record: OffsetsRecord, *, now_ms: int) -> Result:
        transactional_id, metadata = self._decode(record.key, record.value, record.decoded)
        if transactional_id is not None:
            self.latest[transactional_id] = (log_offset, metadata)
        return Result()

    def rebuild_latest(self, surviving: list[tuple[int, OffsetsRecord]], now_ms: int) -> Result:
        self.latest = dict(self.committed)
        for log_offset, record in surviving:
            self.replay_appended(log_offset, record, now_ms=now_ms)
        return Result()

    def replay(self, log_offset: int, key_bytes: bytes | None, value_bytes: bytes | None, *,
               now_ms: int, decoded: tuple[Any, Any] | None = None) -> Result:
        if key_bytes is None:
            return Result()
        transactional_id, metadata = self._decode(key_bytes, value_bytes, decoded)
        if transactional_id is None:
            return Result()  # another record type: skipped, as Kafka's loader does
        if metadata is None:
            self.committed.pop(transactional_id, None)
        else:
            self.committed[transactional_id] = (log_offset, metadata)
        latest = self.latest.get(transactional_id)
        if latest is None or latest[0] <= log_offset:  # not superseded by a write still in flight
            if metadata is None:
                self.latest.pop(transactional_id, None)
            else:
                self.latest[transactional_id] = (log_offset, metadata)
        if self.active and metadata is not None and metadata.state in PREPARED and self.on_prepared is not None:
            self.on_prepared(self.index, metadata)
        if self.on_committed is not None:
            self.on_committed(transactional_id)
        return Result()

    # -- lifecycle and timers -----------------------------------------------------------------

    def activated(self, now_ms: int) -> None:
        """Serving: the abort and expiration checks are armed, and every transaction left
        prepared by an earlier leader gets its markers."""
        self.active = True
        self._abort_check_at = now_ms + self.config.abort_check_interval_ms
        self._expiration_check_at = now_ms + self.config.expiration_check_interval_ms
        if self.on_prepared is not None:
            for _, metadata in list(self.committed.values()):
                if metadata is not None and metadata.state in PREPARED:
                    self.on_prepared(self.index, metadata)

    def unloaded(self, now_ms: int) -> Result:
        self.active = False
        return Result()

    def next_deadline(self) -> int | None:
        deadlines = [d for d in (self._abort_check_at, self._expiration_check_at) if d is not None]
        return min(deadlines) if deadlines else None

    def poll(self, now_ms: int) -> Result:
        result = Result()
        if self._abort_check_at is not None and now_ms >= self._abort_check_at:
            self._abort_check_at = now_ms + self.config.abort_check_interval_ms
            result.merge(self.abort_timed_out(now_ms))
        if self._expiration_check_at is not None and now_ms >= self._expiration_check_at:
            self._expiration_check_at = now_ms + self.config.expiration_check_interval_ms
            result.merge(self.expire_transactional_ids(now_ms))
        return result

    def abort_timed_out(self, now_ms: int) -> Result:
        """Ongoing transactions past their transaction.timeout.ms are aborted by the coordinator,
        with the epoch bumped so their producer is fenced (Kafka's abortTimedOutTransactions)."""
        records = []
        for transactional_id, (_, metadata) in list(self.latest.items()):
            if metadata is None or metadata.state is not S.ONGOING or self.pending(transactional_id):
                continue
            if metadata.start_timestamp_ms + metadata.timeout_ms < now_ms:
                records.append(_record(metadata.fence_and_abort(now_ms)))
        return Result(records=records)

    def expire_transactional_ids(self, now_ms: int) -> Result:
        """Ids idle (finished) for transactional.id.expiration.ms get a tombstone."""
        records = []
        for transactional_id, (_, metadata) in list(self.latest.items()):
            if metadata is None or metadata.state not in EXPIRABLE or self.pending(transactional_id):
                continue
            if metadata.last_update_timestamp_ms + self.config.id_expiration_ms <= now_ms:
                metadata.dead()  # checks the transition
                records.append(OffsetsRecord(encode_transaction_key(transactional_id), None,
                                             decoded=(transactional_id, None)))
        return Result(records=records)

    # -- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None,
                         token: int, now_ms: int, fresh_producer_id: int | None = None) -> Result:
        """Kafka's handleInitProducerId for a transactional id (the empty id and the timeout are
        checked by the API handler first). Responds (error, producer id, epoch), or
        NEEDS_PRODUCER_ID when the transition needs a new producer id and none was given."""
        metadata = self.current(transactional_id)
        if metadata is None:
            if fresh_producer_id is None:
                return Result().respond(token, NEEDS_PRODUCER_ID)
            metadata = TransactionMetadata(transactional_id, fresh_producer_id, NO_PRODUCER_EPOCH, timeout_ms,
                                           S.EMPTY, frozenset(), -1, now_ms)
            fresh_producer_id = None
        elif self.pending(transactional_id):
            return _error(token, ErrorCode.concurrent_transactions)
        if expected is not None and not (
                metadata.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == metadata.producer_id
                or (expected[0] == metadata.last_producer_id and epoch_exhausted(expected[1]))):
            return _error(token, ErrorCode.producer_fenced)
        if metadata.state in PREPARED:
            return _error(token, ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING:
            # Abort it first, at a bumped epoch never handed out; the client retries and gets the
            # epoch after that once the abort completes.
            fenced = metadata.fence_and_abort(now_ms)
            return Result(records=[_record(fenced)],
                          on_failure=lambda code, _now: _error(token, group_append_error(code))
                          ).respond(token, (ErrorCode.concurrent_transactions, -1, -1))
        if epoch_exhausted(metadata.producer_epoch) and (expected is None or expected[1] == metadata.producer_epoch):
            if fresh_producer_id is None:
                return Result().respond(token, NEEDS_PRODUCER_ID)
            after = metadata.rotate_producer_id(fresh_producer_id, timeout_ms, now_ms, expected is not None)
        else:
            after = metadata.bump_epoch(timeout_ms, None if expected is None else expected[1], now_ms)
            if after is None:
                return _error(token, ErrorCode.producer_fenced)
        return Result(records=[_record(after)],
                      on_failure=lambda code, _now: _error(token, group_append_error(code))
                      ).respond(token, (ErrorCode.none, after.producer_id, after.producer_epoch))

    # -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], token: int, now_ms: int) -> Result:
        """Responds the error for every partition of the request (Kafka answers them alike)."""
        partitions = frozenset(partitions)
        metadata = self.current(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return _code(token, ErrorCode.invalid_producer_id_mapping)
        if metadata.producer_epoch != producer_epoch:
            return _code(token, ErrorCode.producer_fenced)
        if self.pending(transactional_id) or metadata.state in PREPARED:
            return _code(token, ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING and partitions <= metadata.partitions:
            return _code(token, ErrorCode.none)
        after = metadata.add_partitions(partitions, now_ms)
        return Result(records=[_record(after)],
                      on_failure=lambda code, _now: _code(token, group_append_error(code))
                      ).respond(token, ErrorCode.none)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """KIP-890 verification (AddPartitionsToTxn v4 verify_only), from the committed view:
        NONE for each partition in the transaction, TRANSACTION_ABORTABLE for the others."""
        partitions = list(partitions)
        metadata = self.committed_state(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            code = ErrorCode.invalid_producer_id_mapping
        elif metadata.producer_epoch != producer_epoch:
            code = ErrorCode.producer_fenced
        elif metadata.state in PREPARED:
            code = ErrorCode.concurrent_transactions
        else:
            return {tp: ErrorCode.none if tp in metadata.partitions else ErrorCode.transaction_abortable
                    for tp in partitions}
        return dict.fromkeys(partitions, code)

    # -- EndTxn and the markers' completion ------------------------------------------------------

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        token: int, now_ms: int) -> Result:
        """Kafka's endTransaction from a client: PrepareCommit/PrepareAbort is written and the
        client answered once it is committed; the markers follow."""
        metadata = self.current(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return _code(token, ErrorCode.invalid_producer_id_mapping)
        if producer_epoch != metadata.producer_epoch:
            return _code(token, ErrorCode.producer_fenced)
        if self.pending(transactional_id):
            return _code(token, ErrorCode.concurrent_transactions)
        state = metadata.state
        if state is S.ONGOING:
            after = metadata.prepare_end(commit, now_ms)
            return Result(records=[_record(after)],
                          on_failure=lambda code, _now: _code(token, group_append_error(code))
                          ).respond(token, ErrorCode.none)
        finished, preparing = (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        if state is finished:
            return _code(token, ErrorCode.none)  # a retry of an end that succeeded
        if state is preparing:
            return _code(token, ErrorCode.concurrent_transactions)
        return _code(token, ErrorCode.invalid_txn_state)

    def complete_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                             token: int, now_ms: int) -> Result:
        """Every marker is written: CompleteCommit/CompleteAbort, if the transaction is still the
        one prepared (else nothing: a later leader or a newer producer took it over)."""
        metadata = self.current(transactional_id)
        wanted = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if (metadata is None or metadata.producer_id != producer_id or metadata.producer_epoch != producer_epoch
                or metadata.state is not wanted or self.pending(transactional_id)):
            return _code(token, ErrorCode.invalid_txn_state)
        return Result(records=[_record(metadata.complete(now_ms))],
                      on_failure=lambda code, _now: _code(token, group_append_error(code))
                      ).respond(token, ErrorCode.none)

    # -- DescribeTransactions, ListTransactions ------------------------------------------------

    def describe(self, transactional_id: str, written: Callable[[str], frozenset[tuple[str, int]]] | None = None
                 ) -> dict[str, Any]:
        metadata = self.committed_state(transactional_id)
        if metadata is None or metadata.state is S.DEAD:
            return describe_error(transactional_id, ErrorCode.transactional_id_not_found)
        partitions = metadata.partitions
        if metadata.state in PREPARED and written is not None:
            partitions = partitions - written(transactional_id)  # only those still without markers
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            topics.setdefault(topic, []).append(partition)
        return {"error_code": ErrorCode.none, "transactional_id": transactional_id,
                "transaction_state": metadata.state.kafka_name, "transaction_timeout": metadata.timeout_ms,
                "transaction_start_time": metadata.start_timestamp_ms, "producer_id": metadata.producer_id,
                "producer_epoch": metadata.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

    def list_transactions(self, states: frozenset[TransactionStatus], producer_ids: frozenset[int],
                          duration_ms: int, pattern: re.Pattern[str] | None, now_ms: int) -> list[dict[str, Any]]:
        """Kafka's listTransactionStates over the committed view (each filter empty: any)."""
        listed = []
        for transactional_id, (_, metadata) in sorted(self.committed.items()):
            if metadata is None or metadata.state is S.DEAD:
                continue
            if states and metadata.state not in states:
                continue
            if producer_ids and metadata.producer_id not in producer_ids:
                continue
            if duration_ms >= 0 and (metadata.state is not S.ONGOING
                                     or now_ms - metadata.start_timestamp_ms <= duration_ms):
                continue
            if pattern is not None and not pattern.search(transactional_id):
                continue
            listed.append({"transactional_id": transactional_id, "producer_id": metadata.producer_id,
                           "transaction_state": metadata.state.kafka_name})
        return listed


def describe_error(transactional_id: str, code: ErrorCode) -> dict[str, Any]:
    # the timeout, start time and producer id stay at Kafka's defaults (0), as Kafka answers an error
    return {"error_code": code, "transactional_id": transactional_id, "transaction_state": "",
            "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
            "producer_epoch": NO_PRODUCER_EPOCH, "topics": []}


def _record(metadata: TransactionMetadata) -> OffsetsRecord:
    return OffsetsRecord(encode_transaction_key(metadata.transactional_id),
                         encode_transaction_value(metadata.to_value()),
                         decoded=(metadata.transactional_id, metadata))


def _error(token: int, code: ErrorCode) -> Result:
    return Result().respond(token, (code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))


def _code(token: int, code: ErrorCode) -> Result:
    return Result().respond(token, code)
