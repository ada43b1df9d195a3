"""The transaction marker sender (Kafka's TransactionMarkerChannelManager and its completion
handler): writes the COMMIT or ABORT markers of prepared transactions to the leaders of their
partitions with WriteTxnMarkers (API 27), and completes each transaction once every marker is
acknowledged.

Markers are batched per destination broker: one WriteTxnMarkers request carries, for every
transaction with partitions led there, one marker entry. Per-partition answers follow Kafka's
completion handler: NONE (and UNSUPPORTED_FOR_MESSAGE_FORMAT / UNSUPPORTED_VERSION, whose
partition the producer could not have written to) counts as written; a leader that moved, was
unavailable or timed out (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS
(_AFTER_APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection) is retried after a
back-off with the leader looked up again; INVALID_PRODUCER_EPOCH or
TRANSACTION_COORDINATOR_FENCED means a newer producer or coordinator owns the transaction, and
its markers are dropped. A partition whose topic is gone needs no marker.

Reaching the leaders is the `MarkerDestinations` interface (the broker's is in
broker/transaction_markers_io.py: the local WriteTxnMarkers handler for partitions led here,
a pooled connection to the leader otherwise), so the sender does no I/O of its own.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode

from tidemark.coordinator.runtime.io import Cancellable, Clock
from tidemark.coordinator.transactions.state import TransactionMetadata
from tidemark.records.transaction_log_schema import TransactionStatus

log = structlog.get_logger("tidemark.transaction_markers")

__all__ = ["MarkerDestinations", "PendingMarkers", "TransactionMarkerChannelManager", "write_txn_markers_request"]

RETRY_BACKOFF_MS = 100

WRITTEN = frozenset({ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
RETRIABLE = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
                       ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                       ErrorCode.request_timed_out, ErrorCode.kafka_storage_error})
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})

TopicPartition = tuple[str, int]
# producer id -> partition -> error, as one WriteTxnMarkers response answers
MarkerErrors = dict[int, dict[TopicPartition, ErrorCode]]


class MarkerDestinations(Protocol):
    def partition_exists(self, topic: str, partition: int) -> bool: ...

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The broker id leading the partition now, None while it has no leader."""
        ...

    async def write_markers(self, broker_id: int, request: dict[str, Any]) -> MarkerErrors:
        """Send one WriteTxnMarkers request (its body) to `broker_id` and return its answers;
        raises OSError/ConnectionError/TimeoutError when the broker does not answer."""
        ...


@dataclasses.dataclass(eq=False)
class PendingMarkers:
    """One prepared transaction whose markers are being written."""

    index: int  # its __transaction_state partition
    coordinator_epoch: int
    metadata: TransactionMetadata
    owner: object  # the shard that handed it over: its markers are sent only while that one serves
    remaining: set[TopicPartition]
    written: set[TopicPartition] = dataclasses.field(default_factory=set)
    in_flight: set[TopicPartition] = dataclasses.field(default_factory=set)
    completing: bool = False

    @property
    def transactional_id(self) -> str:
        return self.metadata.transactional_id

    @property
    def commit(self) -> bool:
        return self.metadata.state is TransactionStatus.PREPARE_COMMIT


def write_txn_markers_request(entries: list[tuple[PendingMarkers, list[TopicPartition]]]) -> dict[str, Any]:
    """The body of a WriteTxnMarkers request (v1, v2) carrying one marker per transaction."""
    markers = []
    for pending, partitions in entries:
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            topics.setdefault(topic, []).append(partition)
        markers.append({"producer_id": pending.metadata.producer_id,
                        "producer_epoch": pending.metadata.producer_epoch,
                        "transaction_result": pending.commit,
                        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
                        "coordinator_epoch": pending.coordinator_epoch})
    return {"markers": markers}


class TransactionMarkerChannelManager:
    """`complete(pending)` writes the transaction's CompleteCommit/CompleteAbort and answers the
    error code of that write (NONE, or why not); `owned(pending)` says whether the shard that
    handed it over still serves (an unload or a new leadership drops its markers; a new
    leadership sends them again)."""

    def __init__(self, destinations: MarkerDestinations, clock: Clock,
                 complete: Callable[[PendingMarkers], Awaitable[ErrorCode]],
                 owned: Callable[[PendingMarkers], bool], retry_backoff_ms: int = RETRY_BACKOFF_MS) -> None:
        self.destinations = destinations
        self.clock = clock
        self._complete = complete
        self._owned = owned
        self.retry_backoff_ms = retry_backoff_ms
        self.pending: dict[str, PendingMarkers] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retry: Cancellable | None = None
        self._scheduled = False
        self._closed = False
        self.requests_sent = 0
        self._failing: set[int] = set()  # brokers whose last WriteTxnMarkers got no answer

    # -- what the coordinator tells it ---------------------------------------------------------

    def add(self, index: int, coordinator_epoch: int, metadata: TransactionMetadata, owner: object = None) -> None:
        """A prepared transaction is committed to the log: write its markers."""
        if self._closed:
            return
        current = self.pending.get(metadata.transactional_id)
        if current is not None and current.metadata == metadata and current.owner is owner:
            return  # already being written
        self.pending[metadata.transactional_id] = PendingMarkers(index, coordinator_epoch, metadata, owner,
                                                                 set(metadata.partitions))
        self._schedule()

    def remove_partition(self, index: int) -> None:
        """This broker no longer coordinates the partition: its transactions' markers are the
        next coordinator's to write."""
        for transactional_id, pending in list(self.pending.items()):
            if pending.index == index:
                del self.pending[transactional_id]

    def written(self, transactional_id: str) -> frozenset[TopicPartition]:
        pending = self.pending.get(transactional_id)
        return frozenset(pending.written) if pending is not None else frozenset()

    async def close(self) -> None:
        self._closed = True
        self.pending.clear()
        if self._retry is not None:
            self._retry.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- sending ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Send what is ready at the next turn of the loop (markers added together go together)."""
        if not self._scheduled and not self._closed:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send_ready)

    def _retry_later(self) -> None:
        if self._retry is None and not self._closed:
            def fire() -> None:
                self._retry = None
                self._schedule()
            self._retry = self.clock.call_at(self.clock.now_ms() + self.retry_backoff_ms, fire)

    def _spawn(self, coroutine: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _send_ready(self) -> None:
        self._scheduled = False
        batches: dict[int, list[tuple[PendingMarkers, list[TopicPartition]]]] = {}
        for pending in list(self.pending.values()):
            if not self._owned(pending):
                self.pending.pop(pending.transactional_id, None)
                continue
            by_broker: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending.remaining - pending.in_flight):
                if not self.destinations.partition_exists(*tp):
                    pending.remaining.discard(tp)  # deleted: nothing left to mark
                    continue
                leader = self.destinations.leader_of(*tp)
                if leader is None:
                    self._retry_later()  # no leader now: look again after the back-off
                    continue
                by_broker.setdefault(leader, []).append(tp)
            for broker, partitions in by_broker.items():
                pending.in_flight.update(partitions)
                batches.setdefault(broker, []).append((pending, partitions))
            self._maybe_complete(pending)
        for broker, entries in batches.items():
            self._spawn(self._send(broker, entries), f"txn-markers-{broker}")

    async def _send(self, broker: int, entries: list[tuple[PendingMarkers, list[TopicPartition]]]) -> None:
        self.requests_sent += 1
        try:
            answers: MarkerErrors | None = await self.destinations.write_markers(broker,
                                                                                write_txn_markers_request(entries))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - disconnected, timed out: retried as Kafka does
            # logged when a broker starts failing, not at every retry
            (log.debug if broker in self._failing else log.info)("txn_markers_not_sent", broker=broker,
                                                                  error=repr(exc))
            self._failing.add(broker)
            answers = None
        else:
            if broker in self._failing:
                self._failing.discard(broker)
                log.info("txn_markers_sent_again", broker=broker)
        retry = False
        for pending, partitions in entries:
            pending.in_flight.difference_update(partitions)
            if self.pending.get(pending.transactional_id) is not pending:
                continue  # dropped meanwhile (unloaded, fenced, superseded)
            errors = (answers or {}).get(pending.metadata.producer_id, {})
            for tp in partitions:
                code = errors.get(tp, ErrorCode.request_timed_out if answers is None else ErrorCode.unknown_server_error)
                if code in WRITTEN:
                    pending.remaining.discard(tp)
                    pending.written.add(tp)
                elif code in FENCED:
                    log.info("txn_markers_fenced", transactional_id=pending.transactional_id, partition=tp,
                             error=code.name)
                    self.pending.pop(pending.transactional_id, None)
                    break
                else:
                    if code not in RETRIABLE:
                        log.warning("txn_marker_failed", transactional_id=pending.transactional_id, partition=tp,
                                    error=code.name)
                    retry = True
            else:
                self._maybe_complete(pending)
        if retry:
            self._retry_later()

    def _maybe_complete(self, pending: PendingMarkers) -> None:
        if pending.remaining or pending.in_flight or pending.completing:
            return
        pending.completing = True
        self._spawn(self._completion(pending), f"txn-complete-{pending.transactional_id}")

    async def _completion(self, pending: PendingMarkers) -> None:
        """Write the transaction's completion; retried while the coordinator is only briefly
        unable to write (Kafka's tryAppendToLog retries COORDINATOR_NOT_AVAILABLE)."""
        try:
            code = await self._complete(pending)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a handler bug: logged, retried
            log.exception("txn_completion_failed", transactional_id=pending.transactional_id)
            code = ErrorCode.unknown_server_error
        if self.pending.get(pending.transactional_id) is not pending:
            return
        if code in (ErrorCode.none, ErrorCode.invalid_txn_state, ErrorCode.not_coordinator,
                    ErrorCode.coordinator_load_in_progress):
            # done, superseded, or no longer ours: the next coordinator resends the markers
            self.pending.pop(pending.transactional_id, None)
            return
        pending.completing = False
        log.info("txn_completion_retried", transactional_id=pending.transactional_id, error=code.name)
        self._retry_later()
