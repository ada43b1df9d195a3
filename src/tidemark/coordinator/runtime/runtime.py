"""The coordinator runtime: drives one shard per partition of a coordinator's topic.

Generic over the shard it drives (Kafka's CoordinatorRuntime over CoordinatorShard): the group
coordinator's shard (coordinator/shard.py) over `__consumer_offsets` today; a transaction
coordinator or KIP-848 groups would be further shard types under the same runtime.

One writer per partition (DESIGN principle 3): every event of a shard (a request or a timer)
runs on that shard's own queue, in order, and returns records and responses. Records are
appended to the partition's log and replayed at once into the shard's latest view
(`replay_appended`), which the next event decides on; when the high watermark passes them they
are replayed, in log order, into its committed view by the same `CoordinatorShard.replay` that
loading uses, whoever wrote them. Responses are released only after the records they depend on
are committed (acks=all, offsets.commit.timeout.ms); a write that times out is answered with its
handler's failure path and still replayed if it commits later; if the log fails under appended
writes the shard rebuilds its latest view (`rebuild_latest`).

The runtime reaches the log only through a `PartitionWriter` and time only through a `Clock`
(io.py; the broker's implementations are in broker/coordinator_io.py). Each shard has a load
state with a checked transition table;
`became_leader(epoch)` and `resigned(epoch)` move it, and an epoch older than the shard's is
ignored, so a stale load or unload can never finish over a newer one.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import functools
import itertools
import time
from collections.abc import Callable
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

import structlog
from kio.schema.errors import ErrorCode

from tidemark.coordinator.partitioner import partition_for
from tidemark.coordinator.result import CommitRecords, OffsetsRecord, Result
from tidemark.coordinator.runtime.io import (
    EVENT_METER, Cancellable, Clock, CoordinatorTopic, Meter, PartitionWriter, SystemClock,
)
from tidemark.hold import hold_async

log = structlog.get_logger("tidemark.group_coordinator")

__all__ = ["CoordinatorRuntime", "CoordinatorShard", "LoadState", "ShardNotAvailable", "ShardRuntime"]

PROGRESS_INTERVAL_S = 2.0
LOAD_SLICE_S = 0.01  # longest a load holds the event loop before letting requests through
LOAD_REPLAY_CHUNK = 10_000  # loading's kept records replayed between two turns of the event loop
LOAD_RETRY_BACKOFF_MS = 100  # a failed load is retried after this, doubling up to the max
LOAD_RETRY_BACKOFF_MAX_MS = 10_000


class LoadState(enum.Enum):
    UNLOADED = "unloaded"  # never loaded here, or resigned
    LOADING = "loading"  # leading: replaying the log before serving
    ACTIVE = "active"  # leading and serving
    FAILED = "failed"  # the load failed; retried with back-off
    # Following (offsets.standby.replay.enable): replaying what this replica holds below the high
    # watermark into the same state the leader keeps, serving nothing, so that becoming leader
    # needs no load.
    STANDBY = "standby"


# Target state -> the states a shard may be in before it.
LOAD_TRANSITIONS: dict[LoadState, frozenset[LoadState]] = {
    LoadState.LOADING: frozenset({LoadState.UNLOADED, LoadState.FAILED, LoadState.STANDBY}),
    LoadState.ACTIVE: frozenset({LoadState.LOADING, LoadState.STANDBY}),
    LoadState.FAILED: frozenset({LoadState.LOADING, LoadState.STANDBY}),
    LoadState.STANDBY: frozenset({LoadState.UNLOADED, LoadState.FAILED}),
    LoadState.UNLOADED: frozenset({LoadState.LOADING, LoadState.ACTIVE, LoadState.FAILED, LoadState.STANDBY}),
}

# What a request to a shard that is not active is answered (Kafka's runtime: LOADING answers
# COORDINATOR_LOAD_IN_PROGRESS, any other inactive state NOT_COORDINATOR).
NOT_ACTIVE_ERRORS: dict[LoadState, ErrorCode] = {
    LoadState.UNLOADED: ErrorCode.not_coordinator,
    LoadState.LOADING: ErrorCode.coordinator_load_in_progress,
    LoadState.FAILED: ErrorCode.not_coordinator,
    LoadState.STANDBY: ErrorCode.not_coordinator,
}


class IllegalLoadTransition(AssertionError):
    """A load-state transition the table does not allow: a runtime bug."""


class ShardNotAvailable(Exception):
    """The group's offsets partition cannot serve it: carries the Kafka error code."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class CoordinatorShard(Protocol):
    """What the runtime needs of a shard (Kafka's CoordinatorShard): its two views' replay (the
    latest view takes a record when it is appended, the committed view when it is committed,
    and the latest is rebuilt when appended records fail), its timers, and hooks when it starts
    serving and when it is unloaded. A shard whose handlers return `CommitRecords` also replays
    such a write whole: `replay_appended_commits` and `replay_commits` (first offset, records);
    one with `replay_chunk` (records read back from the log, now) replays a chunk whole, as
    `replay` of each record in turn would."""

    def replay_appended(self, log_offset: int, record: OffsetsRecord, *, now_ms: int) -> Result: ...

    def rebuild_latest(self, surviving: list[tuple[int, OffsetsRecord]], now_ms: int) -> Result: ...

    def replay(self, log_offset: int, key_bytes: bytes | None, value_bytes: bytes | None, *,
               now_ms: int, decoded: tuple[Any, Any] | None = None) -> Result: ...

    def poll(self, now_ms: int) -> Result: ...

    def next_deadline(self) -> int | None: ...

    def activated(self, now_ms: int) -> None: ...

    def unloaded(self, now_ms: int) -> Result: ...


S = TypeVar("S", bound=CoordinatorShard)
Event = Callable[[S, int], Result]


class ShardRuntime(Generic[S]):
    """One coordinator partition: its shard, its event queue, its timer wake-up and its load state."""

    def __init__(self, runtime: CoordinatorRuntime[S], index: int) -> None:
        self.runtime = runtime
        self.index = index
        self.state = LoadState.UNLOADED
        self.epoch = -1
        self.leading = False  # whether this broker leads the partition at `epoch` (else it follows)
        self.shard: S | None = None
        self.writer: PartitionWriter | None = None
        # (event, its future, released at once: a failure path, which waits for no write)
        # (event, its future, immediate, the submitter's meter)
        self._queue: asyncio.Queue[tuple[Event[S], asyncio.Future[Result], bool, Meter | None]] = asyncio.Queue()
        self._tasks: set[asyncio.Task[Any]] = set()  # load, event loop, high watermark follower
        self._idle = False  # the event task waits on an empty queue (see submit)
        self._pending: collections.deque[_PendingWrite] = collections.deque()  # in log order
        self._replayed_to = 0  # the shard holds every committed record below this offset (read, while loading)
        self._stop_watching: Callable[[], None] | None = None  # ends the log's truncation calls
        self._loaded = False  # the first replay to the high watermark is done
        # A leadership serves (runs events, answers reads) once every record its log held when
        # it began is committed and replayed: whatever an earlier leader acknowledged is among them.
        self._serve_from = 0
        self._serving: asyncio.Future[None] | None = None
        self._last_written = 0  # the end of this leadership's last append
        self._log_failed: ErrorCode | None = None  # the partition's log failed under this leadership
        self._wakeup: Cancellable | None = None
        self._wakeup_at: int | None = None
        self._retry: Cancellable | None = None
        self._failures = 0
        # One timer for the pending writes' timeouts, at the earliest deadline not yet passed
        # (a timer per write cost the loop a timer set and cancelled per commit).
        self._expiry: Cancellable | None = None

    @property
    def clock(self) -> Clock:
        return self.runtime.clock

    def transition_to(self, state: LoadState) -> None:
        if self.state not in LOAD_TRANSITIONS[state]:
            raise IllegalLoadTransition(f"offsets partition {self.index}: {self.state.value} -> {state.value}")
        log.debug("offsets_partition_state", partition=self.index, state=state.value, epoch=self.epoch)
        self.state = state

    # -- leadership ---------------------------------------------------------------------------

    def became_leader(self, epoch: int) -> None:
        """This broker leads the partition at `epoch`: a standby serves at once, anything else
        loads (again, if the epoch is newer)."""
        if epoch < self.epoch or (epoch == self.epoch and self.leading and self.state is not LoadState.UNLOADED):
            log.info("offsets_partition_stale_leadership", partition=self.index, epoch=epoch, current=self.epoch)
            return
        self.epoch = epoch
        self.leading = True
        self._failures = 0
        if not self.runtime.may_lead():  # fenced: loaded once the broker may lead again (relead)
            if self.state is not LoadState.UNLOADED:
                self._unload()
            log.info("offsets_partition_fenced", partition=self.index, epoch=epoch)
            return
        if self.state is LoadState.STANDBY:
            self._promote()
            return
        if self.state is not LoadState.UNLOADED:
            self._unload()
        self._start_load()

    def leader_epoch_bumped(self, epoch: int) -> None:
        """This broker still leads the partition, at a higher epoch (an ISR change by the
        controller, a follower's restart): the shard serves on, at the new epoch, unreloaded."""
        if not self.leading or epoch <= self.epoch or self.state is LoadState.UNLOADED:
            self.became_leader(epoch)  # not leading here yet (or fenced): as any new leadership
            return
        self.epoch = epoch

    def became_follower(self, epoch: int) -> None:
        """This broker follows the partition at `epoch` (a leader, if it was one, resigned):
        keep or start the standby (offsets.standby.replay.enable), else unload."""
        if epoch < self.epoch or (epoch == self.epoch and not self.leading and self.state is not LoadState.UNLOADED):
            return
        self.epoch = epoch
        self.leading = False
        if self.state is LoadState.STANDBY:
            return  # the same log under a new leader: the standby replays on
        if self.state is not LoadState.UNLOADED:
            self._unload()  # a leader's state holds more than the log: start the standby afresh
        if self.runtime.config["offsets.standby.replay.enable"]:
            self._failures = 0
            self._start_load()

    def fence(self) -> None:
        """This broker may no longer act as the partition's leader (its ZooKeeper session is
        suspended or lost): unload, answering whoever waits NOT_COORDINATOR, and stay the
        leader of `epoch` until `relead` or a new role."""
        if self.leading and self.state is not LoadState.UNLOADED:
            log.warning("offsets_partition_fenced", partition=self.index, epoch=self.epoch)
            self._unload()

    def resigned(self, epoch: int | None) -> None:
        """This broker no longer leads the partition (None: it was deleted): unload it."""
        if epoch is not None and epoch < self.epoch:
            log.info("offsets_partition_stale_resignation", partition=self.index, epoch=epoch, current=self.epoch)
            return
        if epoch is not None:
            self.epoch = epoch
        self.leading = False
        if self.state is not LoadState.UNLOADED:
            self._unload()

    def _start_load(self) -> None:
        """Replay the partition into a new shard: to serve it (leading) or to stand by."""
        self.transition_to(LoadState.LOADING if self.leading else LoadState.STANDBY)
        self.writer = self.runtime.topic.writer(self.index)
        self.shard = self.runtime.new_shard(self.index)
        self._loaded = False
        if self._stop_watching is not None:  # a failed load's
            self._stop_watching()
            self._stop_watching = None
        if self.writer is not None:
            self._replayed_to = self.writer.log_start_offset
            self._stop_watching = self.writer.on_truncation(functools.partial(self._truncated, self.shard))
        self._spawn(self._load(self.shard), f"coordinator-load-{self.index}")

    def _truncated(self, shard: CoordinatorShard, cut_from: int) -> None:
        """The log lost records from `cut_from` on (a follower's truncation; below the high
        watermark only when it was unclean): if this state holds any of them, replay afresh.
        Comparing log ends later would miss a truncation refetched past the old end."""
        if self.shard is not shard or cut_from >= self._replayed_to:
            return
        log.warning("offsets_standby_reset", partition=self.index, truncated_to=cut_from,
                    replayed_to=self._replayed_to)
        self._unload()
        self._start_load()

    def _promote(self) -> None:
        """A standby's broker became leader: its shard serves at once, or, while its first
        replay still runs, once that ends (COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        log.info("offsets_partition_promoted", partition=self.index, epoch=self.epoch, loaded=self._loaded,
                 replayed_to=self._replayed_to)
        if self._loaded:
            self._activate()
        else:
            self.transition_to(LoadState.LOADING)

    def _spawn(self, coroutine: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._tasks.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._tasks.discard)

    def _unload(self) -> None:
        """Stop everything of this leadership and answer whoever waits with NOT_COORDINATOR."""
        self._idle = False  # the event task is cancelled: nothing runs events until the next one parks
        for task in list(self._tasks):
            task.cancel()
        if self._stop_watching is not None:
            self._stop_watching()
            self._stop_watching = None
        for handle in (self._wakeup, self._retry):
            if handle is not None:
                handle.cancel()
        self._wakeup = self._wakeup_at = self._retry = None
        unavailable = ShardNotAvailable(ErrorCode.not_coordinator)
        if self._serving is not None and not self._serving.done():
            self._serving.set_exception(unavailable)
            self._serving.exception()  # retrieved here: nobody may be waiting
        self._serving = None
        while not self._queue.empty():
            _, future, _immediate, _meter = self._queue.get_nowait()
            if not future.done():
                future.set_exception(unavailable)
        now = self.clock.now_ms()
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        for write in self._pending:  # their commits are no longer this broker's to wait for
            if not write.answered:
                on_failure = write.result.on_failure
                self._answer(write, on_failure(ErrorCode.not_leader_or_follower, now) if on_failure else write.result)
        self._pending.clear()
        if self.shard is not None:  # held JoinGroup/SyncGroup requests: NOT_COORDINATOR (Kafka's onUnloaded)
            self.runtime.release(self.shard.unloaded(now))
        self.shard = None
        self.writer = None
        self._loaded = False
        self.transition_to(LoadState.UNLOADED)
        log.info("offsets_partition_unloaded", partition=self.index, epoch=self.epoch)

    async def close(self) -> None:
        """Unload and wait for this shard's tasks to end (broker shutdown)."""
        self.resigned(None)
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- loading ------------------------------------------------------------------------------

    async def _load(self, shard: S) -> None:
        try:
            position = await self._replay_to_high_watermark()
        except asyncio.CancelledError:
            raise
        except Exception:
            if self.shard is shard:
                self._failed()
            return
        if self.shard is not shard:
            return  # unloaded meanwhile
        self._failures = 0
        self._replayed_to = position
        self._loaded = True
        # From here on records are replayed as the high watermark passes them, read from the log
        # (a standby's, an earlier leadership's tail), or this leadership's own appends.
        self._spawn(self._follow_high_watermark(shard), f"coordinator-replay-{self.index}")
        if self.state is LoadState.LOADING:
            self._activate()

    def _activate(self) -> None:
        """Serve: events run and reads are answered once the log this leadership begins with is
        committed and replayed (a follower's high watermark may trail its leader's by a fetch)."""
        assert self.shard is not None and self.writer is not None
        self.transition_to(LoadState.ACTIVE)
        self.shard.activated(self.clock.now_ms())
        self._last_written = self._serve_from = self.writer.log_end_offset
        self._serving = asyncio.get_running_loop().create_future()
        self._log_failed = None
        self._spawn(self._run(), f"coordinator-{self.index}")
        self._advance()

    async def serving(self) -> None:
        """Wait until this leadership serves (at once, but for an uncommitted tail of its log);
        ShardNotAvailable if it is unloaded first."""
        if self._serving is None:
            raise ShardNotAvailable(NOT_ACTIVE_ERRORS.get(self.state, ErrorCode.not_coordinator))
        await asyncio.shield(self._serving)

    def _failed(self) -> None:
        backoff = min(LOAD_RETRY_BACKOFF_MS * 2 ** self._failures, LOAD_RETRY_BACKOFF_MAX_MS)
        self._failures += 1
        log.exception("offsets_load_failed", partition=self.index, epoch=self.epoch, retry_in_ms=backoff)
        self.transition_to(LoadState.FAILED)

        def retry() -> None:  # an unload or a new role cancels it
            self._retry = None
            self._start_load()

        self._retry = self.clock.call_at(self.clock.now_ms() + backoff, retry)

    async def _replay_to_high_watermark(self) -> int:
        """Replay the partition from its log start to its current high watermark (loading is
        replay), reading on while the high watermark moves; returns where replay ended.

        Only the last record of each key matters, so the scan keeps the latest record per key
        and decodes and replays just those, in the order of the log (sorted by offset): the
        cost of a long, not yet compacted log is a dict write per record.
        """
        writer, shard = self.writer, self.shard
        if writer is None or shard is None:
            raise RuntimeError(f"offsets partition {self.index} has no log here")
        started = time.perf_counter()
        position = writer.log_start_offset
        records = keys = 0
        next_progress = started + PROGRESS_INTERVAL_S
        next_yield = started + LOAD_SLICE_S
        stuck = False
        read_latest = getattr(writer, "read_latest", None)  # a writer's scan straight into `latest`
        while position < writer.high_watermark and not stuck:
            latest: dict[bytes, tuple[int, bytes | None]] = {}
            while position < (end := writer.high_watermark):
                if read_latest is not None:
                    keyed, after = read_latest(position, end, latest)
                else:
                    chunk, after = writer.read(position, end)
                    keyed = 0
                    for offset, key, value in chunk:
                        if key is not None:
                            latest[key] = (offset, value)
                            keyed += 1
                if after <= position:
                    stuck = True  # nothing readable below the high watermark
                    break
                records += keyed
                position = self._replayed_to = after
                if time.perf_counter() >= next_yield:  # loaded partitions keep serving meanwhile
                    await asyncio.sleep(0)
                    next_yield = time.perf_counter() + LOAD_SLICE_S
                if time.perf_counter() >= next_progress:  # long loads report how far they are
                    next_progress += PROGRESS_INTERVAL_S
                    log.info("offsets_partition_loading", partition=self.index, records=records,
                             position=position, end=end)
            now = self.clock.now_ms()
            # In log order: the order of each key's last record.
            ordered = sorted(latest.items(), key=_by_offset)
            replay_chunk = getattr(shard, "replay_chunk", None)
            if replay_chunk is not None:  # nothing waits on a loading shard: its Results are dropped
                for start in range(0, len(ordered), LOAD_REPLAY_CHUNK):
                    replay_chunk([(offset, key, value) for key, (offset, value) in
                                  ordered[start : start + LOAD_REPLAY_CHUNK]], now_ms=now)
                    await asyncio.sleep(0)
            else:
                for replayed, (key, (offset, value)) in enumerate(ordered, start=1):
                    shard.replay(offset, key, value, now_ms=now)
                    if replayed % LOAD_REPLAY_CHUNK == 0:
                        await asyncio.sleep(0)
            keys += len(latest)
        await hold_async("offsets_load")  # a fault test can hold the partition here, still loading
        seconds = time.perf_counter() - started
        log.info("offsets_partition_loaded", partition=self.index, epoch=self.epoch, records=records, keys=keys,
                 groups=len(getattr(shard, "groups", ())), end=position, seconds=round(seconds, 3),
                 records_per_second=round(records / seconds) if seconds > 0 else None)
        return position

    # -- events -------------------------------------------------------------------------------

    async def _run(self) -> None:
        assert self._serving is not None
        await asyncio.shield(self._serving)
        queue = self._queue
        while True:
            self._idle = True  # parked on an empty queue: `submit` may run an event itself
            try:
                item = await queue.get()
            finally:
                self._idle = False
            self._execute(*item)

    def _execute(self, event: Event[S], future: asyncio.Future[Result], immediate: bool,
                 meter: Meter | None) -> None:
        started = time.perf_counter() if meter is not None else 0.0
        if future.done():
            return
        if not immediate and not self.runtime.may_lead():  # queued before the lease ended (a pause)
            future.set_exception(ShardNotAvailable(ErrorCode.not_coordinator))
            return
        shard = self.shard
        assert shard is not None
        try:
            result = event(shard, self.clock.now_ms())
        except Exception as exc:  # a bug in a handler must not stop the shard
            log.exception("coordinator_event_failed", partition=self.index)
            future.set_exception(exc)
            return
        if immediate:
            self.runtime.release(result)
            future.set_result(result)
        else:
            self._complete(result, future)
        if meter is not None:
            meter.seconds += time.perf_counter() - started
        self._arm_timer()

    def submit(self, event: Event[S]) -> asyncio.Future[Result]:
        """Run or queue an event; the future resolves to its Result once its records are committed.

        With nothing queued and the shard's event task parked on its empty queue, the event runs
        here and now, in the order it would have run from the queue (nothing is ahead of it),
        saving the event loop a task wake-up per request (the commit path's hops are most of a
        single-partition commit's time on the loop)."""
        if self.state is not LoadState.ACTIVE:
            raise ShardNotAvailable(NOT_ACTIVE_ERRORS[self.state])
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        if self._idle and self._queue.empty():
            self._idle = False  # an event that submits another queues it (none does today)
            try:
                self._execute(event, future, False, EVENT_METER.get())
            finally:
                self._idle = True
        else:
            self._queue.put_nowait((event, future, False, EVENT_METER.get()))
        return future

    def _complete(self, result: Result, future: asyncio.Future[Result]) -> None:
        """Append the result's records; its responses wait until the high watermark passes them
        (a result without records waits for every earlier write: what it read may depend on
        them, as in Kafka's runtime)."""
        assert self.writer is not None
        now = self.clock.now_ms()
        if self._log_failed is not None:  # nothing written from here on can commit
            self._write_failed(_PendingWrite(self._last_written, self._last_written, result, future), self._log_failed)
            return
        if result.records:
            try:
                end = self.writer.append(result.records, now)
            except Exception as exc:  # noqa: BLE001 - nothing was written: the handler's failure path
                self._write_failed(_PendingWrite(self._last_written, self._last_written, result, future),
                                   self.runtime.topic.error_code(exc))
                return
            write = _PendingWrite(end - len(result.records), end, result, future)
            self._last_written = end
            self._replay_appended(write, now)
        else:
            write = _PendingWrite(self._last_written, self._last_written, result, future)
        if write.end <= self._replayed_to:
            self._released(write)
            return
        write.deadline = now + self.runtime.config["offsets.commit.timeout.ms"]
        self._pending.append(write)
        if self._expiry is None:
            self._expiry = self.clock.call_at(write.deadline, self._expire_writes)

    def _expire_writes(self) -> None:
        """Answer REQUEST_TIMED_OUT every pending write whose deadline has come, and wait for
        the earliest deadline still ahead."""
        self._expiry = None
        now = self.clock.now_ms()
        next_deadline: int | None = None
        for write in list(self._pending):
            if write.answered or write.deadline is None:
                continue
            if write.deadline <= now:
                self._write_failed(write, ErrorCode.request_timed_out)
            elif next_deadline is None or write.deadline < next_deadline:
                next_deadline = write.deadline
        if next_deadline is not None and self._expiry is None:
            self._expiry = self.clock.call_at(next_deadline, self._expire_writes)

    def _replay_appended(self, write: _PendingWrite, now: int) -> None:
        """The latest view takes the write's records as they are appended: the next event
        decides on them."""
        shard = self.shard
        assert shard is not None
        records = write.result.records
        if type(records) is CommitRecords:  # an OffsetCommit's: one pass, completes nothing
            shard.replay_appended_commits(write.first, records, now_ms=now)  # type: ignore[attr-defined]
            return
        for offset, record in enumerate(records, start=write.first):
            replayed = shard.replay_appended(offset, record, now_ms=now)
            if replayed.responses:
                self.runtime.release(replayed)

    def _rebuild_latest(self) -> None:
        """Appended writes failed: the latest view is the committed one plus the writes still
        pending that did not fail."""
        assert self.shard is not None
        surviving = [(offset, record) for write in self._pending if not write.answered
                     for offset, record in enumerate(write.result.records, start=write.first)]
        self.runtime.release(self.shard.rebuild_latest(surviving, self.clock.now_ms()))

    def _write_failed(self, write: _PendingWrite, code: ErrorCode) -> None:
        """An append that failed, or was not committed in time: answer its requests through the
        handler's failure path. A timed-out write stays pending: if it commits later it is
        replayed like any other (the log, not the answer, decides the state)."""
        if write.answered:
            return
        on_failure = write.result.on_failure
        if on_failure is None:
            self._answer(write, write.result)
        else:
            write.answered = True
            self._queue.put_nowait((lambda _shard, now: on_failure(code, now), write.future, True, None))

    def _released(self, write: _PendingWrite) -> None:
        """The write's records are committed and replayed: its responses go."""
        if not write.answered:
            self._answer(write, write.result)

    def _answer(self, write: _PendingWrite, result: Result) -> None:
        write.answered = True
        self.runtime.release(result)
        if not write.future.done():
            write.future.set_result(result)

    # -- replay: the one path by which the shard's state changes --------------------------------

    async def _follow_high_watermark(self, shard: S) -> None:
        """Replay records as the high watermark passes them, and release what waited on them
        (leading or standing by: the same replay)."""
        writer = self.writer
        assert writer is not None
        while self.shard is shard:
            if writer.log_end_offset < self._replayed_to or writer.log_start_offset > self._replayed_to:
                # Only an unclean truncation cuts below a high watermark, and a follower restarts
                # its log past its end only when the leader's starts there: either way this state
                # and the log part, so replay it afresh.
                log.warning("offsets_standby_reset", partition=self.index, log_end=writer.log_end_offset,
                            replayed_to=self._replayed_to)
                self._unload()
                self._start_load()
                return
            self._advance()
            high_watermark = writer.high_watermark
            waiting_for = self._replayed_to + 1 if high_watermark <= self._replayed_to else high_watermark + 1
            try:
                await writer.wait_for_high_watermark(waiting_for)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the leadership ended, or the log failed or went away
                code = self.runtime.topic.error_code(exc)
                if code == ErrorCode.not_leader_or_follower:
                    # The leadership that appended the pending writes ended before they committed:
                    # not ours to acknowledge. The log itself is sound: replay goes on (an unload
                    # follows if this broker no longer leads).
                    for write in list(self._pending):
                        self._write_failed(write, code)
                    continue
                self._log_failed = code
                for write in list(self._pending):
                    self._write_failed(write, self._log_failed)
                self._rebuild_latest()
                return

    def _advance(self) -> None:
        """Replay [replayed_to, high watermark): this shard's own writes from the records they
        carry, anything else (an earlier leadership's tail) read from the log."""
        writer, shard = self.writer, self.shard
        assert writer is not None and shard is not None
        high_watermark = writer.high_watermark
        pending = self._pending
        replayed = Result()
        while True:
            write = pending[0] if pending else None
            if write is not None and write.end <= self._replayed_to:
                pending.popleft()
                self.runtime.release(replayed)
                replayed = Result()
                if write.end > write.first and writer.below_min_insync():  # committed by too few replicas
                    self._write_failed(write, ErrorCode.not_enough_replicas_after_append)
                self._released(write)
                continue
            if self._replayed_to >= high_watermark:
                break
            now = self.clock.now_ms()
            if write is not None and write.first == self._replayed_to:
                if write.end > high_watermark:
                    break  # a batch commits whole
                records = write.result.records
                if type(records) is CommitRecords:  # an OffsetCommit's: one pass, completes nothing
                    shard.replay_commits(write.first, records, now_ms=now)  # type: ignore[attr-defined]
                    self._replayed_to = write.end
                    continue
                replay = shard.replay
                for offset, record in enumerate(records, start=write.first):
                    done = replay(offset, record.key, record.value, now_ms=now, decoded=record.decoded)
                    if done.responses or done.records or done.on_failure is not None:  # most complete nothing
                        replayed.merge(done)
                self._replayed_to = write.end
                continue
            upper = high_watermark if write is None else min(high_watermark, write.first)
            chunk, after = writer.read(self._replayed_to, upper)
            if after <= self._replayed_to:
                break  # nothing readable below the high watermark
            replay_chunk = getattr(shard, "replay_chunk", None)  # a whole chunk's replay, if the shard has one
            if replay_chunk is not None:
                replayed.merge(replay_chunk(chunk, now_ms=now))
            else:
                for offset, key, value in chunk:
                    replayed.merge(shard.replay(offset, key, value, now_ms=now))
            self._replayed_to = after
        self.runtime.release(replayed)
        if self._serving is not None and not self._serving.done() and self._replayed_to >= self._serve_from:
            self._serving.set_result(None)
        self._arm_timer()

    # -- timers -------------------------------------------------------------------------------

    def _arm_timer(self) -> None:
        """One wake-up at the shard's earliest deadline; firing is an event like any other. Only
        a serving leader's timers fire: a standby never writes (no expiry, no session ends)."""
        if self.shard is None or self.state is not LoadState.ACTIVE:
            return
        deadline = self.shard.next_deadline()
        if deadline == self._wakeup_at:
            return
        if self._wakeup is not None:
            self._wakeup.cancel()
        self._wakeup = None
        self._wakeup_at = deadline
        if deadline is not None:
            self._wakeup = self.clock.call_at(deadline, self._on_wakeup)

    def _on_wakeup(self) -> None:
        self._wakeup = self._wakeup_at = None
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_result)
        self._queue.put_nowait((lambda shard, now: shard.poll(now), future, False, None))


@dataclasses.dataclass(slots=True)
class _PendingWrite:
    """A result waiting for the high watermark: records at [first, end) (first == end: none)."""

    first: int
    end: int
    result: Result
    future: asyncio.Future[Result]
    deadline: int | None = None  # when it is answered REQUEST_TIMED_OUT if not committed by then
    answered: bool = False


def _by_offset(item: tuple[Any, tuple[int, Any]]) -> int:
    return item[1][0]


def _consume_result(future: asyncio.Future[Result]) -> None:
    """For events nobody awaits (timers): their failures are already logged by the shard loop."""
    if not future.cancelled():
        future.exception()


class CoordinatorRuntime(Generic[S]):
    """All partitions of a coordinator's topic this broker leads (on one broker: all of them),
    each driving one shard of type S made by `new_shard`.

    `config` is the broker's settings, read by name: offsets.commit.timeout.ms (how long a write
    may wait for the high watermark), offsets.standby.replay.enable, zookeeper.connect."""

    def __init__(self, topic_name: str, config: Mapping[str, Any], topic: CoordinatorTopic,
                 new_shard: Callable[[int], S], default_partitions: int, clock: Clock | None = None) -> None:
        self.topic_name = topic_name
        self.config = config
        self.topic = topic
        self.new_shard = new_shard
        self.default_partitions = default_partitions
        self.clock: Clock = clock or SystemClock()
        self.shards: dict[int, ShardRuntime[S]] = {}
        # In a ZooKeeper cluster the partitions this broker leads are loaded as the cluster hands
        # them over (partition_led / partition_resigned), at their leader epochs.
        self.clustered = bool(config["zookeeper.connect"])
        # Whether this broker may act as the leader of what it leads (in a cluster: its ZooKeeper
        # session's lease, broker/cluster/session_fence.py); reads and writes are refused
        # NOT_COORDINATOR while it may not.
        self.may_lead: Callable[[], bool] = lambda: True
        self._leader_epoch = 0  # on one broker: bumped each time the topic is deleted
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}  # request token -> its response
        self.topic.on_deleted(self._offsets_topic_deleted)

    @property
    def num_partitions(self) -> int:
        count = self.topic.partition_count()
        return count if count is not None else self.default_partitions

    def start(self) -> None:
        """Load every offsets partition that exists (asynchronously: requests see LOAD_IN_PROGRESS)."""
        if not self.clustered and self.topic.partition_count() is not None:
            self._lead_all()

    def partition_led(self, topic: str, index: int, leader_epoch: int) -> None:
        """This broker became the leader of a partition (of the offsets topic: load it)."""
        if topic == self.topic_name:
            self._runtime(index).became_leader(leader_epoch)

    def partition_leader_epoch(self, topic: str, index: int, leader_epoch: int) -> None:
        """This broker leads the partition on, at a higher leader epoch (nothing to load)."""
        if topic == self.topic_name:
            self._runtime(index).leader_epoch_bumped(leader_epoch)

    def partition_followed(self, topic: str, index: int, leader_epoch: int) -> None:
        """This broker follows a partition (of the offsets topic: stand by, or unload)."""
        if topic == self.topic_name:
            self._runtime(index).became_follower(leader_epoch)

    def fence(self) -> None:
        """This broker may no longer act as a leader (`may_lead` turned false): every shard it
        leads unloads, keeping its leader epoch for `relead`."""
        for runtime in self.shards.values():
            runtime.fence()

    def fenced_leaderships(self) -> dict[int, int]:
        """Partition -> leader epoch of the shards this broker led when it was fenced (and any
        leadership it was given meanwhile), not loaded since."""
        return {index: runtime.epoch for index, runtime in self.shards.items()
                if runtime.leading and runtime.state is LoadState.UNLOADED}

    def relead(self, index: int, leader_epoch: int) -> None:
        """The broker may lead again and still leads partition `index` at `leader_epoch` under
        the cluster's current state: load it afresh from the log, as a new leadership."""
        runtime = self.shards.get(index)
        if runtime is not None and runtime.leading and runtime.epoch == leader_epoch \
                and runtime.state is LoadState.UNLOADED:
            log.info("offsets_partition_relead", partition=index, epoch=leader_epoch)
            runtime.became_leader(leader_epoch)

    def _runtime(self, index: int) -> ShardRuntime[S]:
        runtime = self.shards.get(index)
        if runtime is None:
            runtime = self.shards[index] = ShardRuntime(self, index)
        return runtime

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use (and again after it was deleted), as Kafka
        does on FindCoordinator, and load its shards. (In a cluster the handlers create it
        through the cluster, and its leaders load it.)"""
        if self.clustered:
            return
        if self.topic.partition_count() is None:
            self.topic.create()
            self._lead_all()
        elif not self.shards:
            self._lead_all()

    def _lead_all(self) -> None:
        count = self.topic.partition_count()
        assert count is not None
        for index in range(count):
            self._runtime(index).became_leader(self._leader_epoch)

    def _offsets_topic_deleted(self) -> None:
        """Every shard resigns: its cache goes, and requests get NOT_COORDINATOR until the topic
        is created again (then the shards load afresh at the next epoch)."""
        for runtime in self.shards.values():
            runtime.resigned(self._leader_epoch)
        self._leader_epoch += 1

    async def stop(self) -> None:
        """Unload every shard (held requests are answered NOT_COORDINATOR)."""
        await asyncio.gather(*(runtime.close() for runtime in self.shards.values()))
        for future in self._waiting.values():
            if not future.done():
                future.cancel()

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> ShardRuntime[S]:
        """The shard serving `group_id`, or ShardNotAvailable with the code to answer."""
        if not self.shards and not self.clustered:
            self.ensure_offsets_topic()  # first use on a fresh broker
        runtime = self.shards.get(self.partition_for(group_id))
        if runtime is None:
            raise ShardNotAvailable(ErrorCode.not_coordinator)
        return runtime

    # -- requests -----------------------------------------------------------------------------

    def new_token(self) -> tuple[int, asyncio.Future[Any]]:
        """A token naming one request, and the future its response will be released into. The
        token is forgotten as its response is released, or by `forget_token` once the caller
        stops waiting (no done callback per request: each cost the event loop a callback run)."""
        token = next(self._tokens)
        future = self._waiting[token] = asyncio.get_running_loop().create_future()
        return token, future

    def forget_token(self, token: int) -> None:
        self._waiting.pop(token, None)

    def release(self, result: Result) -> None:
        waiting = self._waiting
        for token, response in result.responses.items():
            future = waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(response)

    async def call(self, group_id: str, event: Callable[[S, int, int], Result],
                   error_response: Callable[[ErrorCode], Any]) -> Any:
        """Run `event(shard, token, now)` on the group's shard and await this request's response
        (which may be released by a later event, e.g. a JoinGroup completed by another member)."""
        try:
            shard = self.shard_for(group_id)
            self._check_lead()
        except ShardNotAvailable as exc:
            return error_response(exc.code)
        token, response = self.new_token()
        try:
            try:
                handled = shard.submit(lambda s, now: event(s, token, now))
            except ShardNotAvailable as exc:
                return error_response(exc.code)
            try:
                await handled  # raises if the handler failed: the dispatcher answers UNKNOWN_SERVER_ERROR
            except ShardNotAvailable as exc:  # unloaded before the event ran
                response.cancel()
                return error_response(exc.code)
            finally:
                if not response.done() and handled.done() and handled.exception() is not None:
                    response.cancel()
            return await response
        finally:
            self.forget_token(token)

    def _check_lead(self) -> None:
        """NOT_COORDINATOR while this broker may not act as a leader, before `fence` has run
        (the lease ends before the event loop hears of it)."""
        if not self.may_lead():
            raise ShardNotAvailable(ErrorCode.not_coordinator)

    async def read(self, group_id: str, reader: Callable[[S], Any],
                   error_response: Callable[[ErrorCode], Any]) -> Any:
        """A read of committed state (OffsetFetch, DescribeGroups): no queue, no records."""
        try:
            runtime = self.shard_for(group_id)
            if runtime.state is not LoadState.ACTIVE:
                raise ShardNotAvailable(NOT_ACTIVE_ERRORS[runtime.state])
            await runtime.serving()
            self._check_lead()  # checked as the read is answered: a cache may be stale from here on
        except ShardNotAvailable as exc:
            return error_response(exc.code)
        assert runtime.shard is not None
        return reader(runtime.shard)
