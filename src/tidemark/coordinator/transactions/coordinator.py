"""The transaction coordinator: the coordinator runtime driving one `TransactionShard` per
`__transaction_state` partition, and the marker sender (Kafka's TransactionCoordinator over its
TransactionStateManager and TransactionMarkerChannelManager).

It loads, fails over and stands by exactly as the group coordinator does (the same runtime):
a leader of a partition serves it, a follower replays it as a warm standby
(offsets.standby.replay.enable), and a new leader resends the markers of every transaction its
log left prepared. The coordinator epoch written into markers is the partition's leader epoch.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.coordinator.partitioner import partition_for
from tidemark.coordinator.runtime import Clock, CoordinatorRuntime, CoordinatorTopic, LoadState
from tidemark.coordinator.transactions.markers import MarkerDestinations, PendingMarkers, \
    TransactionMarkerChannelManager
from tidemark.coordinator.transactions.shard import TransactionConfig, TransactionShard
from tidemark.coordinator.transactions.state import TransactionMetadata
from tidemark.records.transaction_log_schema import TRANSACTION_STATE_TOPIC, TransactionStatus

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator"]


def runtime_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime's settings for the transaction log: its writes wait up to request.timeout.ms
    (as Kafka's TransactionStateManager appends), standby and cluster as the broker's."""
    return {"offsets.commit.timeout.ms": config["request.timeout.ms"],
            "offsets.standby.replay.enable": config["offsets.standby.replay.enable"],
            "zookeeper.connect": config["zookeeper.connect"]}


class TransactionCoordinator(CoordinatorRuntime[TransactionShard]):
    def __init__(self, config: Mapping[str, Any], *, topic: CoordinatorTopic, destinations: MarkerDestinations,
                 clock: Clock | None = None) -> None:
        self.shard_config = TransactionConfig(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_check_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            expiration_check_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        )
        super().__init__(TRANSACTION_STATE_TOPIC, runtime_settings(config), topic,
                         lambda index: TransactionShard(index, self.shard_config, self._prepared, self._committed),
                         config["transaction.state.log.num.partitions"], clock)
        self.markers = TransactionMarkerChannelManager(destinations, self.clock, self._complete, self._owned)
        self.add_wait_ms = min(config["add.partitions.to.txn.retry.backoff.max.ms"], config["request.timeout.ms"])
        self._durable_waiters: dict[str, list[asyncio.Future[None]]] = {}

    # -- adds that wait out the previous transaction's completion ------------------------------

    def _committed(self, transactional_id: str) -> None:
        for waiter in self._durable_waiters.pop(transactional_id, ()):
            if not waiter.done():
                waiter.set_result(None)

    async def call_settled(self, transactional_id: str, event: Callable[[TransactionShard, int, int], Any],
                           error_response: Callable[[ErrorCode], Any]) -> Any:
        """`call`, asked again at each durable record of the id while it answers
        CONCURRENT_TRANSACTIONS, for up to add.partitions.to.txn.retry.backoff.max.ms: a client
        beginning its next transaction right after EndTxn finds the previous one still writing
        its markers and CompleteCommit; held here, it is answered once that is done instead of
        retrying after its own back-off (100 ms for AddOffsetsToTxn), as Kafka retries such adds
        on the broker (KAFKA-18654)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.add_wait_ms / 1000
        while True:
            # registered before asking, so a record made durable meanwhile is not missed
            waiter: asyncio.Future[None] = loop.create_future()
            self._durable_waiters.setdefault(transactional_id, []).append(waiter)
            try:
                result = await self.call(transactional_id, event, error_response)
                remaining = deadline - loop.time()
                if result is not ErrorCode.concurrent_transactions or remaining <= 0:
                    return result
                try:
                    await asyncio.wait_for(waiter, remaining)
                except TimeoutError:
                    return result
            finally:
                self._forget_waiter(transactional_id, waiter)

    def _forget_waiter(self, transactional_id: str, waiter: asyncio.Future[None]) -> None:
        waiters = self._durable_waiters.get(transactional_id)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self._durable_waiters[transactional_id]

    # -- the marker sender's hooks ----------------------------------------------------------------

    def _prepared(self, index: int, metadata: TransactionMetadata) -> None:
        runtime = self.shards.get(index)
        if runtime is not None and runtime.state is LoadState.ACTIVE:
            self.markers.add(index, runtime.epoch, metadata, runtime.shard)

    def _owned(self, pending: PendingMarkers) -> bool:
        """The shard that prepared it still serves: a leader epoch bumped under the same
        leadership (an ISR change) keeps it; an unload or a new load does not."""
        runtime = self.shards.get(pending.index)
        return runtime is not None and runtime.state is LoadState.ACTIVE and runtime.shard is pending.owner

    async def _complete(self, pending: PendingMarkers) -> ErrorCode:
        if not self._owned(pending):
            return ErrorCode.not_coordinator
        metadata = pending.metadata
        return await self.call(
            metadata.transactional_id,
            lambda shard, token, now: shard.complete_transaction(
                metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, pending.commit, token, now),
            lambda code: code)

    def _offsets_topic_deleted(self) -> None:
        super()._offsets_topic_deleted()
        self.markers.pending.clear()

    async def stop(self) -> None:
        await self.markers.close()
        await super().stop()

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def ensure_topic(self) -> None:
        self.ensure_offsets_topic()  # the runtime's name for creating its topic on first use

    # -- reads across shards ------------------------------------------------------------------

    def list_transactions(self, states: frozenset[TransactionStatus], producer_ids: frozenset[int],
                          duration_ms: int, pattern: re.Pattern[str] | None) -> tuple[list[dict[str, Any]], ErrorCode]:
        """ListTransactions across every shard this broker serves, from their committed views
        (COORDINATOR_LOAD_IN_PROGRESS while one it leads is still loading); none before the
        topic exists (listing does not create it)."""
        now = self.clock.now_ms()
        listed: list[dict[str, Any]] = []
        for runtime in self.shards.values():
            if runtime.state is LoadState.ACTIVE and runtime.shard is not None:
                listed.extend(runtime.shard.list_transactions(states, producer_ids, duration_ms, pattern, now))
            elif runtime.leading:
                return [], ErrorCode.coordinator_load_in_progress
        return listed, ErrorCode.none
