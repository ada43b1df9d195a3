"""Incremental fetch sessions (KIP-227) between a follower and its leader.

A follower's full fetch names every partition it follows from its leader, and the answer names
them all again. With a few hundred partitions, decoding that request and encoding that answer
cost more broker CPU than the commits the fetch replicates (BENCHMARKS.md: a cluster's commit
p50 went from 5 ms to 36 ms with 200 idle partitions). In a session the leader keeps each
partition's fetch position and what its last answer said of it. The follower's next request then
names only partitions whose position moved (and those added or forgotten), and the answer names
only partitions with records, a new high watermark or log start, or an error.

Nor does the leader read every partition of a session on every fetch: walking a few hundred idle
partitions cost more than the commit a fetch replicates (BENCHMARKS.md). A fetch reads the
partitions the request names (their positions moved: the high watermark moves with them) and
those appended to or whose high watermark moved since the session last read them (partitions
tell the cache, `partition_changed`); an append also wakes the session's parked fetch. Every
SESSION_SWEEP_MS at most, a fetch reads them all, which brings what changes rarely and outside
appends (a log start moved by retention, a leadership lost, a topic deleted) and counts every
partition as fetched, so an idle follower stays in the ISR.

A request names its session by (session_id, session_epoch):
  (0, -1)          no session: a full fetch (every version before 7 is one)
  (any, 0)         a full fetch opening a new session (and closing the one named, if any)
  (id, -1)         a full fetch closing session `id`, without a new one
  (id, n > 0)      incremental: FETCH_SESSION_ID_NOT_FOUND for an unknown id,
                   INVALID_FETCH_SESSION_EPOCH unless n is the epoch the session expects next
A leader may decline a session by answering session id 0 (KIP-227 lets it). tidemark opens one
only for a follower (a replica id that follows a partition this broker leads) naming topics by
name (tidemark's followers fetch with v12), one per follower:
its new session replaces its old one. So the cache holds at most one session per broker of the
cluster, each no larger than one request can name. Consumers' requests for a session are
declined, and they go on with full fetches.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark import metrics

if TYPE_CHECKING:
    from tidemark.replication.partition import Partition

NO_SESSION = 0
SESSION_SWEEP_MS = 100  # a session's fetches read all its partitions at least this often
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

# A partition as a fetch names it: (topic name, or from v13 the topic id; partition index).
PartitionKey = tuple[str | uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (it wraps to 1: 0 and -1 mean full fetches)."""
    return 1 if epoch >= INT32_MAX else epoch + 1


@dataclasses.dataclass(slots=True)
class FetchPosition:
    """One partition of a fetch: where the fetcher reads from, and (in a session) what the last
    answer told it, so an incremental answer repeats the partition only when that changes."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    answered_high_watermark: int | None = None
    answered_log_start_offset: int | None = None

    def answer_is_news(self, answer: dict[str, Any]) -> bool:
        """Whether `answer` for this partition says anything its last one did not; records it."""
        news = (bool(answer["records"]) or answer["error_code"] != 0
                or answer["high_watermark"] != self.answered_high_watermark
                or answer["log_start_offset"] != self.answered_log_start_offset)
        self.answered_high_watermark = answer["high_watermark"]
        self.answered_log_start_offset = answer["log_start_offset"]
        return news


@dataclasses.dataclass(slots=True)
class FetchSession:
    id: int
    replica_id: int
    epoch: int  # the epoch its next request must carry
    partitions: dict[PartitionKey, FetchPosition]
    changed: set[PartitionKey] = dataclasses.field(default_factory=set)  # since this session last read them
    swept_ms: int | None = None  # when a fetch last read every partition of the session
    _appended: asyncio.Future[None] | None = None  # done at the next append to one of its partitions

    def to_read(self, requested: dict[PartitionKey, FetchPosition], now_ms: int, incremental: bool
                ) -> dict[PartitionKey, FetchPosition]:
        """The partitions a fetch reads: those it names and those changed since, or all of them
        (a full fetch, or once SESSION_SWEEP_MS passed since the last fetch that read them all)."""
        if not incremental or self.swept_ms is None or now_ms - self.swept_ms >= SESSION_SWEEP_MS:
            self.swept_ms = now_ms
            self.changed.clear()
            return self.partitions
        reading = {key: self.partitions[key] for key in requested}
        reading.update(self.take_changed())
        return reading

    def take_changed(self) -> dict[PartitionKey, FetchPosition]:
        """The partitions changed since the last call (or sweep), to be read now."""
        changed, self.changed = self.changed, set()
        return {key: self.partitions[key] for key in changed if key in self.partitions}

    @property
    def watched(self) -> bool:
        """A fetch of this session waits (or waited) for the next append."""
        return self._appended is not None

    def watch(self) -> asyncio.Future[None]:
        """A future done at the next append to a partition of the session (never cancel it)."""
        if self._appended is None:
            self._appended = asyncio.get_running_loop().create_future()
        return self._appended

    def partition_changed(self, key: PartitionKey, appended: bool) -> None:
        self.changed.add(key)
        if appended and self._appended is not None:
            if not self._appended.done():
                self._appended.set_result(None)
            self._appended = None

    def update(self, requested: dict[PartitionKey, FetchPosition], forgotten: Iterable[PartitionKey]) -> None:
        """An incremental request: forget what it forgets, take the positions it names."""
        for key in forgotten:
            self.partitions.pop(key, None)
        for key, position in requested.items():
            known = self.partitions.get(key)
            if known is None:
                self.partitions[key] = position
            else:
                known.fetch_offset = position.fetch_offset
                known.partition_max_bytes = position.partition_max_bytes
                known.current_leader_epoch = position.current_leader_epoch


class FetchSessionCache:
    """The sessions this broker holds, at most one per follower."""

    def __init__(self) -> None:
        self._by_id: dict[int, FetchSession] = {}
        self._by_replica: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def open(self, replica_id: int, partitions: dict[PartitionKey, FetchPosition]) -> FetchSession:
        self.close(self._by_replica.get(replica_id, NO_SESSION))
        session_id = NO_SESSION
        while session_id == NO_SESSION or session_id in self._by_id:
            session_id = random.randint(1, INT32_MAX)
        session = FetchSession(session_id, replica_id, next_epoch(INITIAL_EPOCH), partitions)
        self._by_id[session_id] = session
        self._by_replica[replica_id] = session_id
        metrics.FETCH_SESSIONS.set(len(self._by_id))
        return session

    def close(self, session_id: int) -> None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            del self._by_replica[session.replica_id]
            metrics.FETCH_SESSIONS.set(len(self._by_id))

    def session_of(self, replica_id: int) -> FetchSession | None:
        session_id = self._by_replica.get(replica_id)
        return self._by_id.get(session_id) if session_id is not None else None

    def partition_changed(self, partition: Partition, appended: bool) -> None:
        """`partition` was appended to (or its high watermark moved): the sessions holding it
        read it at their next fetch, and an append wakes their parked fetch. (Sessions name
        topics by name: a fetch naming them by id, v13+, is declined a session.)"""
        if not self._by_id:
            return
        key = (partition.topic, partition.index)
        for session in self._by_id.values():
            if key in session.partitions:
                session.partition_changed(key, appended)

    def incremental(self, session_id: int, epoch: int, replica_id: int, requested: dict[PartitionKey, FetchPosition],
                    forgotten: Iterable[PartitionKey]) -> FetchSession | ErrorCode:
        """The session an incremental request continues, updated by it, or the error it gets
        (another fetcher's session is as unknown as a closed one)."""
        session = self._by_id.get(session_id)
        if session is None or session.replica_id != replica_id:
            return ErrorCode.fetch_session_id_not_found
        if epoch != session.epoch:
            return ErrorCode.invalid_fetch_session_epoch
        session.epoch = next_epoch(epoch)
        session.update(requested, forgotten)
        return session


class FollowerSession:
    """The follower's half of a session: what the leader's session holds, so that a request
    names only what changed since. One per connection (a new connection starts a new session)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._held: dict[PartitionKey, tuple[int, ...]] = {}  # the leader's session, as last answered

    def request(self, fetching: dict[PartitionKey, tuple[int, ...]]
                ) -> tuple[int, int, dict[PartitionKey, tuple[int, ...]], list[PartitionKey]]:
        """(session id, epoch, partitions to name, partitions to forget) of the next request,
        given every partition to fetch with its request fields."""
        if self.id == NO_SESSION:
            return NO_SESSION, INITIAL_EPOCH, fetching, []
        changed = {key: fields for key, fields in fetching.items() if self._held.get(key) != fields}
        forgotten = [key for key in self._held if key not in fetching]
        return self.id, self.epoch, changed, forgotten

    def answered(self, requested: tuple[int, int, dict[PartitionKey, tuple[int, ...]], list[PartitionKey]],
                 error_code: int, session_id: int) -> None:
        """The leader answered `requested` (what `request` returned) with this top-level error
        and session id."""
        was_id, _, named, forgotten = requested
        if error_code != 0:
            self._reset()  # lost or out of step: the next request is a full one
        elif was_id == NO_SESSION:
            self.id, self.epoch, self._held = session_id, next_epoch(INITIAL_EPOCH), dict(named)
        else:
            for key in forgotten:
                del self._held[key]
            self._held.update(named)
            self.epoch = next_epoch(self.epoch)
