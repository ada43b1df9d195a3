"""A follower's fetcher: for every partition this broker follows from one leader, fetch what the
leader has past this replica's log end and append it as it is (Kafka's ReplicaFetcherThread).

Before a partition's first fetch (and after every leader change) the follower asks the leader,
with OffsetForLeaderEpoch, where its own latest epoch ends on the leader and truncates what lies
past that (KIP-101, KIP-279's answer), so no two replicas keep different records at one offset.
Each fetch carries the follower's log end (which moves the leader's high watermark) and the
leader epoch it follows (KIP-320: a leader of another epoch refuses). Fetches after a
connection's first are incremental (KIP-227, `fetch_sessions.py`): they name only partitions
whose position moved, and the answer only partitions with something new. A partition the leader
refuses (not its leader yet, or of another epoch) is retried after replica.fetch.backoff.ms;
the broker hands it over to another fetcher when the cluster's view names another leader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.replication.fetch_sessions import FollowerSession
from tidemark.log.leader_epoch import UNDEFINED_EPOCH
from tidemark.wire.client import BrokerConnection

if TYPE_CHECKING:
    from tidemark.replication.partition import Partition

log = structlog.get_logger("tidemark.replica_fetcher")

FETCH = 1
OFFSET_FOR_LEADER_EPOCH = 23
FETCH_VERSION = 12  # replica_id in the body, current_leader_epoch per partition
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # replica_id in the body

TopicPartition = tuple[str, int]


class ReplicaFetcher:
    def __init__(self, local_id: int, leader_id: int, address: Callable[[], tuple[str, int] | None], *,
                 append: Callable[[Partition, bytes], None],
                 move_log_start: Callable[[Partition, int], object] | None = None, max_wait_ms: int = 500, max_bytes: int = 1048576,
                 backoff_ms: int = 1000, request_timeout_ms: int = 30_000) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self._address = address  # the leader's (host, port) now, or None while unknown
        self._append = append  # append a leader's records to a follower partition, as they are
        self._move_log_start = move_log_start  # follow the leader's log start (DeleteRecords, retention)
        self._max_wait_ms = max_wait_ms  # replica.fetch.wait.max.ms
        self._max_bytes = max_bytes  # replica.fetch.max.bytes
        self._backoff_s = backoff_ms / 1000  # replica.fetch.backoff.ms
        self._timeout_s = request_timeout_ms / 1000
        self.partitions: dict[TopicPartition, Partition] = {}
        self._unchecked: set[TopicPartition] = set()  # to truncate against the leader first
        self._delayed: dict[TopicPartition, float] = {}  # refused: not fetched again before (loop time)
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- membership -----------------------------------------------------------------------------

    def add(self, partition: Partition) -> None:
        """Follow `partition` from this leader (again, after a leadership change)."""
        key = (partition.topic, partition.index)
        self.partitions[key] = partition
        self._unchecked.add(key)
        self._delayed.pop(key, None)
        self._changed.set()

    def remove(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions.pop(key, None)
        self._unchecked.discard(key)
        self._delayed.pop(key, None)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    # -- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        connection: BrokerConnection | None = None
        session = FollowerSession()  # replaced with each new connection
        while True:
            if not self.partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            if len(self._delayed) == len(self.partitions):  # every partition waits out a refusal
                await asyncio.sleep(max(0.0, min(self._delayed.values()) - asyncio.get_running_loop().time()))
            now = asyncio.get_running_loop().time()
            for key in [k for k, until in self._delayed.items() if until <= now]:
                del self._delayed[key]
            try:
                if connection is None:
                    connection = await self._connect()
                    session = FollowerSession()
                if self._unchecked:
                    await self._truncate(connection)
                await self._fetch(connection, session)
            except asyncio.CancelledError:
                if connection is not None:
                    await connection.close()
                raise
            except Exception as exc:  # noqa: BLE001 - the leader went away or answered badly: retry
                log.warning("replica_fetch_failed", leader=self.leader_id, error=repr(exc))
                if connection is not None:
                    await connection.close()
                    connection = None
                await asyncio.sleep(self._backoff_s)

    async def _connect(self) -> BrokerConnection:
        address = self._address()
        if address is None:
            raise ConnectionError(f"broker {self.leader_id} has no known address")
        return await BrokerConnection.connect(*address, client_id=f"replica-{self.local_id}",
                                              timeout_s=self._timeout_s)

    async def _truncate(self, connection: BrokerConnection) -> None:
        """KIP-279: cut each unchecked partition back to where its latest epoch ends on the leader."""
        wanted = {key: self.partitions[key] for key in self._unchecked
                  if key in self.partitions and key not in self._delayed}
        if not wanted:
            return
        response = await connection.request(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.local_id,
            "topics": _by_topic(wanted, lambda p: {"leader_epoch": p.log.latest_epoch})}, self._timeout_s)
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition)
                partition = wanted.get(key)
                if partition is None:
                    continue
                if answer.error_code != ErrorCode.none:
                    self._paused(partition, ErrorCode(answer.error_code))
                    continue
                local_log = partition.log
                if answer.leader_epoch == UNDEFINED_EPOCH or local_log.latest_epoch == UNDEFINED_EPOCH:
                    end = partition.high_watermark  # nothing to compare epochs by: keep what is committed
                else:
                    own_epoch, own_end = local_log.end_offset_for_epoch(answer.leader_epoch)
                    end = min(answer.end_offset, own_end) if own_epoch == answer.leader_epoch else answer.end_offset
                if end < local_log.log_end_offset:
                    log.info("follower_truncated", topic=key[0], partition=key[1], leader=self.leader_id,
                             from_offset=local_log.log_end_offset, to_offset=end)
                    local_log.truncate_to(end)
                self._unchecked.discard(key)

    async def _fetch(self, connection: BrokerConnection, session: FollowerSession) -> None:
        fetching = {key: p for key, p in self.partitions.items() if key not in self._unchecked
                    and key not in self._delayed}
        if not fetching:
            return
        requested = session.request({key: (p.log.log_end_offset, p.log.log_start_offset, p.leader_epoch)
                                     for key, p in fetching.items()})
        session_id, epoch, named, forgotten = requested
        response = await connection.request(FETCH, FETCH_VERSION, {
            "replica_id": self.local_id, "max_wait": self._max_wait_ms, "min_bytes": 1,
            "max_bytes": self._max_bytes, "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": _by_topic({key: fetching[key] for key in named}, lambda p: {
                "fetch_offset": p.log.log_end_offset, "log_start_offset": p.log.log_start_offset,
                "partition_max_bytes": self._max_bytes}),
            "forgotten_topics_data": _forgotten_by_topic(forgotten), "rack_id": ""},
            self._timeout_s + self._max_wait_ms / 1000)
        session.answered(requested, response.error_code, response.session_id)
        if response.error_code != ErrorCode.none:
            log.info("fetch_session_reset", leader=self.leader_id, error=ErrorCode(response.error_code).name)
            return
        for topic in response.responses:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition_index)
                partition = fetching.get(key)
                if partition is None or self.partitions.get(key) is not partition:
                    continue  # handed over meanwhile
                code = ErrorCode(answer.error_code)
                if code == ErrorCode.offset_out_of_range:
                    self._unchecked.add(key)  # compare epochs again before fetching on
                    continue
                if code != ErrorCode.none:
                    self._paused(partition, code)
                    continue
                if answer.records:
                    self._append(partition, bytes(answer.records))
                partition.leader_high_watermark(answer.high_watermark)
                if self._move_log_start is not None and answer.log_start_offset > partition.log.log_start_offset:
                    self._move_log_start(partition, min(answer.log_start_offset, partition.high_watermark))

    def _paused(self, partition: Partition, code: ErrorCode) -> None:
        """The leader refuses this partition (it has not taken the leadership yet, or one of us
        is on a stale epoch): try again after the back-off, unless the view moves it first."""
        log.info("replica_fetch_refused", topic=partition.topic, partition=partition.index, leader=self.leader_id,
                 error=code.name)
        self._delayed[(partition.topic, partition.index)] = asyncio.get_running_loop().time() + self._backoff_s


def _by_topic(partitions: dict[TopicPartition, Partition],
              fields: Callable[[Partition], dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's topics: each partition with the leader epoch it follows, and `fields`."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), partition in partitions.items():
        by_topic.setdefault(topic, []).append(
            {"partition": index, "current_leader_epoch": partition.leader_epoch, **fields(partition)})
    return [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]


def _forgotten_by_topic(forgotten: list[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in forgotten:
        by_topic.setdefault(topic, []).append(index)
    return [{"topic": topic, "partitions": indexes} for topic, indexes in by_topic.items()]
