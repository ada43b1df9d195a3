"""A follower's fetcher: for every partition this broker follows from one leader, fetch what the
leader has past this replica's log end and append it as it is (Kafka's ReplicaFetcherThread).

A partition added (a new leadership) is first "truncating", as in Kafka's AbstractFetcherThread:
each round asks the leader, with OffsetForLeaderEpoch, where the follower's latest epoch ends
there and truncates by `truncation.truncation_state` (KIP-101, KIP-279). When the leader
answers an epoch the follower never saw (fast leader changes) the follower cuts back to the end
of its own largest epoch below it and asks again, now with that lower epoch, until both name an
epoch they share; only then does the partition fetch. A follower with no epochs at all asks
nothing and truncates to its high watermark. An answer that comes back after the partition's
leadership moved is ignored. A fetch out of range truncates again, first asking the leader's log
start (ListOffsets): a log ending below it (records deleted there meanwhile) starts afresh there.
A truncation is made on the event loop and made durable on the disk threads (the log by the
flusher's, the lowered recovery point's checkpoint by the LogManager's), awaited before its
partition fetches again (Kafka's truncation is durable before the fetcher goes on).

Each fetch carries the follower's log end (which moves the leader's high watermark) and the
leader epoch it follows (KIP-320: a leader of another epoch refuses). Fetches after a
connection's first are incremental (KIP-227, `fetch_sessions.py`): they name only partitions
whose position moved, and the answer only partitions with something new. A partition the leader
refuses (not its leader yet, or of another epoch) is retried after replica.fetch.backoff.ms;
the broker hands it over to another fetcher when the cluster's view names another leader.

An append or truncation that fails on one partition (its log offline, a batch that does not
continue the log) marks that partition failed (Kafka's failedPartitions): logged once, counted,
no longer fetched, while the others go on. It is fetched again only once added again (a new
leadership for it). A corrupt batch only delays the partition, as in Kafka: the next fetch reads
it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import structlog
from kio.schema.errors import ErrorCode

from tidemark import metrics
from tidemark.log.leader_epoch import UNDEFINED_EPOCH
from tidemark.records.errors import CorruptRecordError, InvalidRecordError
from tidemark.replication.fetch_sessions import FollowerSession
from tidemark.replication.truncation import TruncationState, follower_truncation
from tidemark.wire.client import BrokerConnection, Opener

if TYPE_CHECKING:
    from tidemark.replication.partition import Partition

log = structlog.get_logger("tidemark.replica_fetcher")

FETCH = 1
LIST_OFFSETS = 2
OFFSET_FOR_LEADER_EPOCH = 23
FETCH_VERSION = 12  # replica_id in the body, current_leader_epoch per partition
LIST_OFFSETS_VERSION = 4  # current_leader_epoch per partition
EARLIEST_TIMESTAMP = -2
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # replica_id in the body
STOP_RECANCEL_S = 1.0  # stop() cancels the loop again after this long if it is still running

TopicPartition = tuple[str, int]


class ReplicaFetcher:
    def __init__(self, local_id: int, leader_id: int, address: Callable[[], tuple[str, int] | None], *,
                 append: Callable[[Partition, bytes], object],
                 sync_truncations: Callable[[list[Partition]], Awaitable[list[BaseException | None]]],
                 move_log_start: Callable[[Partition, int], Awaitable[int]] | None = None, max_wait_ms: int = 500, max_bytes: int = 1048576,
                 backoff_ms: int = 1000, request_timeout_ms: int = 30_000, opener: Opener | None = None) -> None:
        self.local_id = local_id
        self.leader_id = leader_id
        self._address = address  # the leader's (host, port) now, or None while unknown
        self._append = append  # append a leader's records to a follower partition, as they are
        self._sync_truncations = sync_truncations  # make truncations durable, off the event loop
        self._move_log_start = move_log_start  # follow the leader's log start (DeleteRecords, retention)
        self._max_wait_ms = max_wait_ms  # replica.fetch.wait.max.ms
        self._max_bytes = max_bytes  # replica.fetch.max.bytes
        self._backoff_s = backoff_ms / 1000  # replica.fetch.backoff.ms
        self._timeout_s = request_timeout_ms / 1000
        self._opener = opener  # TLS and SASL towards a secured inter-broker listener (None: plain TCP)
        self.partitions: dict[TopicPartition, Partition] = {}
        self._truncating: set[TopicPartition] = set()  # to truncate against the leader before fetching
        self._out_of_range: set[TopicPartition] = set()  # truncating after an OFFSET_OUT_OF_RANGE fetch
        self._delayed: dict[TopicPartition, float] = {}  # refused: not fetched again before (loop time)
        self.failed: set[TopicPartition] = set()  # append or truncation failed: not fetched until added again
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- membership -----------------------------------------------------------------------------

    def add(self, partition: Partition) -> None:
        """Follow `partition` from this leader (again, after a leadership change): truncate
        first, then fetch. A partition that failed here is fetched again."""
        key = (partition.topic, partition.index)
        self._forget_failure(key)
        self.partitions[key] = partition
        self._truncating.add(key)
        self._out_of_range.discard(key)
        self._delayed.pop(key, None)
        self._changed.set()

    def remove(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.partitions.pop(key, None)
        self._truncating.discard(key)
        self._out_of_range.discard(key)
        self._delayed.pop(key, None)
        self._forget_failure(key)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        # Cancelled again until it ends: on Python 3.11 a wait_for whose operation completes as
        # the cancellation arrives swallows it, and the loop would go on fetching.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=STOP_RECANCEL_S)
        if task is not None and not task.cancelled():
            task.exception()  # retrieved: nothing but cancellation ends the loop
        for key in list(self.failed):
            self._forget_failure(key)

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
                if self._truncating:
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
                                              timeout_s=self._timeout_s, opener=self._opener)

    # -- truncation -----------------------------------------------------------------------------

    async def _truncate(self, connection: BrokerConnection) -> None:
        """One round of Kafka's maybeTruncate: partitions without epochs truncate to their high
        watermark; the others ask where their latest epoch ends on the leader and truncate by
        its answer, staying "truncating" while the answer is not final. Each truncation is
        made durable (in the disk thread) before its partition leaves "truncating": nothing is
        fetched into a log whose cut a crash could undo."""
        truncated: list[_Truncated] = []
        try:
            await self._truncate_logs(connection, truncated)
        finally:
            await self._made_durable(truncated)

    async def _made_durable(self, truncated: list[_Truncated]) -> None:
        if not truncated:
            return
        errors = await self._sync_truncations([t.partition for t in truncated])
        for t, error in zip(truncated, errors):
            if error is not None:
                self._failed(t.key, "truncate", error)
            elif t.completed and self._still_truncating(t.key, t.partition, t.leader_epoch):
                self._truncating.discard(t.key)

    async def _truncate_logs(self, connection: BrokerConnection, truncated: list[_Truncated]) -> None:
        if self._out_of_range & self._truncating:
            await self._start_past_leader_log_start(connection, truncated)
        restarted = {t.key for t in truncated}
        wanted = {key: self.partitions[key] for key in self._truncating
                  if key in self.partitions and key not in self._delayed and key not in restarted}
        asked: dict[TopicPartition, tuple[Partition, int, int]] = {}  # (partition, leader epoch, latest epoch)
        for key, partition in wanted.items():
            if partition.log.latest_epoch == UNDEFINED_EPOCH:
                high_watermark = partition.high_watermark
                self._apply(key, partition, TruncationState(min(high_watermark, partition.log.log_end_offset), True),
                            truncated)
            else:
                asked[key] = (partition, partition.leader_epoch, partition.log.latest_epoch)
        if not asked:
            return
        response = await connection.request(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.local_id,
            "topics": _by_topic({key: p for key, (p, _, _) in asked.items()},
                                lambda p: {"leader_epoch": asked[(p.topic, p.index)][2]})}, self._timeout_s)
        answers = {(topic.topic, answer.partition): answer for topic in response.topics for answer in topic.partitions}
        for key, (partition, leader_epoch, _) in asked.items():
            if not self._still_truncating(key, partition, leader_epoch):
                continue  # the leadership moved while the leader answered: its answer is stale
            answer = answers.get(key)
            if answer is None:
                self._paused(partition, ErrorCode.unknown_server_error)  # the leader left it out
                continue
            if answer.error_code != ErrorCode.none:
                self._paused(partition, ErrorCode(answer.error_code))
                continue
            state = follower_truncation(partition.log, answer.leader_epoch, answer.end_offset, partition.high_watermark)
            self._apply(key, partition, state, truncated, answered=(answer.leader_epoch, answer.end_offset))

    async def _start_past_leader_log_start(self, connection: BrokerConnection, truncated: list[_Truncated]) -> None:
        """A fetch out of range (Kafka's fetchOffsetAndTruncate): a follower whose log ends below
        the leader's log start (records deleted there while it was away) starts its log afresh
        at the leader's log start; any other goes through the epoch comparison."""
        wanted = {key: self.partitions[key] for key in self._out_of_range & self._truncating
                  if key in self.partitions and key not in self._delayed}
        if not wanted:
            return
        asked = {key: p.leader_epoch for key, p in wanted.items()}
        response = await connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": self.local_id, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": index, "current_leader_epoch": asked[(topic, index)],
                                                "timestamp": EARLIEST_TIMESTAMP} for t, index in asked if t == topic]}
                for topic in {topic for topic, _ in asked}]}, self._timeout_s)
        answers = {(topic.name, answer.partition_index): answer
                   for topic in response.topics for answer in topic.partitions}
        for key, partition in wanted.items():
            if not self._still_truncating(key, partition, asked[key]):
                continue
            answer = answers.get(key)
            code = ErrorCode(answer.error_code) if answer is not None else ErrorCode.unknown_server_error
            if code != ErrorCode.none:
                self._paused(partition, code)  # asked again after the back-off
                continue
            self._out_of_range.discard(key)
            if answer.offset > partition.log.log_end_offset:
                log.warning("follower_log_restarted", topic=key[0], partition=key[1], leader=self.leader_id,
                            log_end_offset=partition.log.log_end_offset, leader_log_start_offset=answer.offset)
                try:
                    partition.log.truncate_fully_and_start_at(answer.offset)
                except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
                    self._failed(key, "truncate", exc)
                    continue
                truncated.append(_Truncated(key, partition, asked[key], completed=True))

    def _still_truncating(self, key: TopicPartition, partition: Partition, leader_epoch: int) -> bool:
        """Whether `partition` is still followed from this leader at `leader_epoch`, and truncating."""
        return (self.partitions.get(key) is partition and key in self._truncating
                and partition.leader_id == self.leader_id and partition.leader_epoch == leader_epoch)

    def _apply(self, key: TopicPartition, partition: Partition, state: TruncationState,
               truncated: list[_Truncated], answered: tuple[int, int] | None = None) -> None:
        local_log = partition.log
        if state.offset < local_log.log_end_offset or not state.completed:
            log.info("follower_truncated", topic=key[0], partition=key[1], leader=self.leader_id,
                     from_offset=local_log.log_end_offset, to_offset=state.offset, completed=state.completed,
                     answered=answered)
        try:
            # Also at the log end, as Kafka: epochs starting there (a leadership that wrote
            # nothing) go, so an unfinished round asks again with a lower epoch.
            local_log.truncate_to(state.offset)
        except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
            self._failed(key, "truncate", exc)
            return
        truncated.append(_Truncated(key, partition, partition.leader_epoch, state.completed))

    # -- fetching -------------------------------------------------------------------------------

    async def _fetch(self, connection: BrokerConnection, session: FollowerSession) -> None:
        fetching = {key: p for key, p in self.partitions.items() if key not in self._truncating
                    and key not in self._delayed}
        if not fetching:
            return
        positions = {key: (p.log.log_end_offset, p.log.log_start_offset, p.leader_epoch)
                     for key, p in fetching.items()}
        requested = session.request(positions)
        session_id, epoch, named, forgotten = requested
        response = await connection.request(FETCH, FETCH_VERSION, {
            "replica_id": self.local_id, "max_wait": self._max_wait_ms, "min_bytes": 1,
            "max_bytes": self._max_bytes, "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
            "topics": _by_topic({key: fetching[key] for key in named}, lambda p: {
                "fetch_offset": positions[(p.topic, p.index)][0],
                "log_start_offset": positions[(p.topic, p.index)][1],
                "partition_max_bytes": self._max_bytes}),
            "forgotten_topics_data": _forgotten_by_topic(forgotten), "rack_id": ""},
            self._timeout_s + self._max_wait_ms / 1000)
        session.answered(requested, response.error_code, response.session_id)
        if response.error_code != ErrorCode.none:
            log.info("fetch_session_reset", leader=self.leader_id, error=ErrorCode(response.error_code).name)
            return
        log_starts: list[tuple[TopicPartition, Partition, int]] = []  # followed after the appends
        for topic in response.responses:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition_index)
                partition = fetching.get(key)
                if partition is None or not self._still_fetching(key, partition, positions[key]):
                    continue  # handed over, re-added or truncated meanwhile: the answer is stale
                code = ErrorCode(answer.error_code)
                if code == ErrorCode.offset_out_of_range:
                    self._truncating.add(key)  # compare epochs again (and log starts) before fetching on
                    self._out_of_range.add(key)
                    continue
                if code != ErrorCode.none:
                    self._paused(partition, code)
                    continue
                try:
                    self._process(partition, answer, log_starts)
                except (CorruptRecordError, InvalidRecordError) as exc:
                    # Maybe a torn read on the leader: fetch it again after the back-off.
                    log.warning("replica_fetch_corrupt", topic=key[0], partition=key[1], leader=self.leader_id,
                                error=repr(exc))
                    self._delayed[key] = asyncio.get_running_loop().time() + self._backoff_s
                except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
                    self._failed(key, "append", exc)
        for key, partition, offset in log_starts:
            # Durable (checkpointed, off the event loop) before the next fetch reports it.
            try:
                await self._move_log_start(partition, offset)
            except Exception as exc:  # noqa: BLE001 - this partition fails, the others go on
                self._failed(key, "log start", exc)

    def _still_fetching(self, key: TopicPartition, partition: Partition, position: tuple[int, ...]) -> bool:
        """Whether the answer for `key` still applies: the same partition, fetching, at the
        offset and leader epoch it was fetched from (Kafka's check before processing)."""
        return (self.partitions.get(key) is partition and key not in self._truncating
                and partition.leader_id == self.leader_id
                and (partition.log.log_end_offset, partition.leader_epoch) == (position[0], position[2]))

    def _process(self, partition: Partition, answer: Any, log_starts: list[tuple[TopicPartition, Partition, int]]) -> None:
        if answer.records:
            self._append(partition, bytes(answer.records))
        partition.leader_high_watermark(answer.high_watermark)
        if self._move_log_start is not None and answer.log_start_offset > partition.log.log_start_offset:
            log_starts.append(((partition.topic, partition.index), partition,
                               min(answer.log_start_offset, partition.high_watermark)))

    def _paused(self, partition: Partition, code: ErrorCode) -> None:
        """The leader refuses this partition (it has not taken the leadership yet, or one of us
        is on a stale epoch): try again after the back-off, unless the view moves it first."""
        log.info("replica_fetch_refused", topic=partition.topic, partition=partition.index, leader=self.leader_id,
                 error=code.name)
        self._delayed[(partition.topic, partition.index)] = asyncio.get_running_loop().time() + self._backoff_s

    def _failed(self, key: TopicPartition, stage: str, exc: BaseException) -> None:
        """Kafka's markPartitionFailed: stop fetching this partition until it is added again."""
        log.error("replica_partition_failed", topic=key[0], partition=key[1], leader=self.leader_id, stage=stage,
                  error=repr(exc))
        self.partitions.pop(key, None)
        self._truncating.discard(key)
        self._out_of_range.discard(key)
        self._delayed.pop(key, None)
        if key not in self.failed:
            self.failed.add(key)
            metrics.REPLICA_FAILED_PARTITIONS.inc()

    def _forget_failure(self, key: TopicPartition) -> None:
        if key in self.failed:
            self.failed.discard(key)
            metrics.REPLICA_FAILED_PARTITIONS.dec()


class _Truncated(NamedTuple):
    """A truncation made on the event loop, to be made durable before its partition fetches."""

    key: TopicPartition
    partition: Partition
    leader_epoch: int  # the partition's when truncated: a later leadership truncates again
    completed: bool  # the partition fetches once it is durable (else it asks the leader again)


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
