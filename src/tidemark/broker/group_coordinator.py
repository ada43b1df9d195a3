"""The coordinator runtime: drives one CoordinatorShard per `__consumer_offsets` partition.

One writer per offsets partition (DESIGN principle 3): every event of a shard (a request or a
timer) runs on that shard's own queue, in order. Records a handler returns are appended to the
partition's log and the handler's responses are released only once the high watermark passes
them (acks=all, offsets.commit.timeout.ms); then the records are replayed into the shard, which
is also exactly how loading works.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog
from kio.schema.errors import ErrorCode

from tidemark.broker.errors import error_code_for
from tidemark.coordinator.membership import GroupConfig
from tidemark.coordinator.partitioner import partition_for
from tidemark.coordinator.result import Result
from tidemark.coordinator.shard import CoordinatorConfig, CoordinatorShard
from tidemark.hold import hold_async
from tidemark.records import build_batch, iter_batches, iter_key_values
from tidemark.records.compression import CompressionType

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.broker.partition import Partition
    from tidemark.broker.replica_manager import ReplicaManager

log = structlog.get_logger("tidemark.group_coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
PROGRESS_INTERVAL_S = 2.0
LOAD_SLICE_S = 0.01  # longest a load holds the event loop before letting requests through


def now_ms() -> int:
    return int(time.time() * 1000)


class LoadState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


class ShardNotAvailable(Exception):
    """The group's offsets partition cannot serve it: carries the Kafka error code."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class ShardRuntime:
    """One offsets partition: its shard, its event queue and its load state."""

    def __init__(self, runtime: GroupCoordinator, partition: Partition, shard: CoordinatorShard) -> None:
        self.runtime = runtime
        self.partition = partition
        self.shard = shard
        self.state = LoadState.LOADING
        self._queue: asyncio.Queue[tuple[Callable[[CoordinatorShard, int], Result], asyncio.Future[Result]]] = (
            asyncio.Queue()
        )
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight: set[asyncio.Task[None]] = set()  # commits awaiting the high watermark

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"coordinator-{self.partition.index}")

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in [self._task, *self._in_flight]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*([self._task] if self._task else []), *self._in_flight, return_exceptions=True)

    async def _run(self) -> None:
        try:
            await self._load()
        except Exception:
            log.exception("offsets_load_failed", partition=self.partition.index)
            self.state = LoadState.FAILED
            return
        self.state = LoadState.ACTIVE
        self._schedule_timer()
        while True:
            event, future = await self._queue.get()
            if future.cancelled():
                continue
            try:
                result = event(self.shard, now_ms())
            except Exception as exc:  # a bug in a handler must not stop the shard
                log.exception("coordinator_event_failed", partition=self.partition.index)
                future.set_exception(exc)
                continue
            self._complete(result, future)
            self._schedule_timer()

    async def _load(self) -> None:
        """Replay the partition from its log start to its high watermark (loading is replay).

        Only the last record of each key matters, so the scan keeps the latest record per key
        (moved to the end on every rewrite, so the order stays that of the log) and decodes and
        replays just those: the cost of a long, not yet compacted log is a dict write per record.
        """
        started = time.perf_counter()
        partition_log = self.partition.log
        position, end = partition_log.log_start_offset, self.partition.high_watermark
        chunk = self.runtime.config["offsets.load.buffer.size"]
        latest: dict[bytes, tuple[int, bytes | None]] = {}
        records = 0
        next_progress = started + PROGRESS_INTERVAL_S
        next_yield = started + LOAD_SLICE_S
        while position < end:
            data = partition_log.read(position, chunk, upper_bound=end)
            if not data:
                break
            for batch_position, header in iter_batches(data, validate=False):
                for offset, key, value in iter_key_values(data, batch_position):
                    if key is not None:
                        latest.pop(key, None)
                        latest[key] = (offset, value)
                        records += 1
                position = header.last_offset + 1
                if time.perf_counter() >= next_yield:  # loaded partitions keep serving meanwhile
                    await asyncio.sleep(0)
                    next_yield = time.perf_counter() + LOAD_SLICE_S
            if time.perf_counter() >= next_progress:  # long loads report how far they are
                next_progress += PROGRESS_INTERVAL_S
                log.info("offsets_partition_loading", partition=self.partition.index, records=records,
                         position=position, end=end)
        await hold_async("offsets_load")
        now = now_ms()
        for replayed, (key, (offset, value)) in enumerate(latest.items(), start=1):
            self.shard.replay(offset, key, value, loading=True, now_ms=now)
            if replayed % 10_000 == 0:
                await asyncio.sleep(0)
        seconds = time.perf_counter() - started
        log.info("offsets_partition_loaded", partition=self.partition.index, records=records, keys=len(latest),
                 groups=len(self.shard.groups), seconds=round(seconds, 3),
                 records_per_second=round(records / seconds) if seconds > 0 else None)

    def submit(self, event: Callable[[CoordinatorShard, int], Result]) -> asyncio.Future[Result]:
        """Queue an event; the future resolves to its Result once its records are committed."""
        if self.state is LoadState.LOADING:
            raise ShardNotAvailable(ErrorCode.coordinator_load_in_progress)
        if self.state is LoadState.FAILED:
            raise ShardNotAvailable(ErrorCode.coordinator_not_available)
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((event, future))
        return future

    def _complete(self, result: Result, future: asyncio.Future[Result]) -> None:
        """Append the result's records; release its responses once they are committed."""
        if not result.records:
            self.runtime.release(result)
            future.set_result(result)
            return
        batch = build_batch(
            [(record.key, record.value, (), now_ms()) for record in result.records],
            compression=CompressionType(self.runtime.config["offsets.topic.compression.codec"]),
        )
        try:
            info = self.runtime.replicas.append(self.partition, batch)
        except Exception as exc:  # noqa: BLE001 - mapped to the coordinator's error codes
            self._fail(result, future, _append_error(exc))
            return
        committed = self.partition.wait_for_high_watermark(info.last_offset + 1)
        timeout = self.runtime.config["offsets.commit.timeout.ms"] / 1000
        task = asyncio.get_running_loop().create_task(
            self._await_commit(result, future, committed, info.first_offset, timeout))
        self._in_flight.add(task)  # the loop keeps only weak references to tasks
        task.add_done_callback(self._in_flight.discard)

    async def _await_commit(self, result: Result, future: asyncio.Future[Result], committed: asyncio.Future[None],
                            first_offset: int, timeout: float) -> None:
        try:
            await asyncio.wait_for(committed, timeout)
        except TimeoutError:
            self._fail(result, future, ErrorCode.request_timed_out)
            return
        except Exception as exc:  # noqa: BLE001
            self._fail(result, future, _append_error(exc))
            return
        now = now_ms()
        for offset, record in enumerate(result.records, start=first_offset):
            self.shard.replay(offset, record.key, record.value, loading=False, now_ms=now, decoded=record.decoded)
        self.runtime.release(result)
        future.set_result(result)

    def _fail(self, result: Result, future: asyncio.Future[Result], code: ErrorCode) -> None:
        responses = result.on_append_failure(code) if result.on_append_failure else {}
        result.responses = responses
        self.runtime.release(result)
        future.set_result(result)

    def _schedule_timer(self) -> None:
        """Run the shard's timers (sessions, rebalance deadlines) as queued events."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.shard.membership.next_deadline()
        if deadline is None:
            return
        delay = max(0.0, (deadline - now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_consume_result)
        self._queue.put_nowait((lambda shard, now: shard.membership.poll(now), future))


def _consume_result(future: asyncio.Future[Result]) -> None:
    """For events nobody awaits (timers): their failures are already logged by the shard loop."""
    if not future.cancelled():
        future.exception()


def _append_error(exc: BaseException) -> ErrorCode:
    """Facts §4: how a failed append of offsets records reaches the client."""
    code = error_code_for(exc)
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_record):
        return ErrorCode.invalid_commit_offset_size
    if code is ErrorCode.request_timed_out:
        return code
    return ErrorCode.unknown_server_error


class GroupCoordinator:
    """All offsets partitions this broker leads (on one broker: all of them)."""

    def __init__(self, config: BrokerConfig, replicas: ReplicaManager) -> None:
        self.config = config
        self.replicas = replicas
        self.shards: dict[int, ShardRuntime] = {}
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}  # request token -> its response
        self._expiry_task: asyncio.Task[None] | None = None
        self.shard_config = CoordinatorConfig(
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            group=GroupConfig(
                min_session_timeout_ms=config["group.min.session.timeout.ms"],
                max_session_timeout_ms=config["group.max.session.timeout.ms"],
                initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
                max_size=config["group.max.size"],
            ),
        )

    @property
    def num_partitions(self) -> int:
        topic = self.replicas.topic(OFFSETS_TOPIC)
        return topic.partitions if topic else self.config["offsets.topic.num.partitions"]

    def start(self) -> None:
        """Load every offsets partition that exists (asynchronously: requests see LOAD_IN_PROGRESS),
        and start the periodic offsets retention check."""
        if self.replicas.topic(OFFSETS_TOPIC) is not None:
            self._start_shards()
        self._expiry_task = asyncio.get_running_loop().create_task(self._expire_periodically(), name="offsets-expiry")

    async def _expire_periodically(self) -> None:
        """Every offsets.retention.check.interval.ms, an expiry event on each loaded shard's queue
        (an event like any other: the timer never touches shard state itself)."""
        interval = self.config["offsets.retention.check.interval.ms"] / 1000
        retention_ms = self.config["offsets.retention.minutes"] * 60_000
        while True:
            await asyncio.sleep(interval)
            for runtime in list(self.shards.values()):
                if runtime.state is LoadState.ACTIVE:
                    runtime.submit(lambda shard, now: shard.expire_offsets(now, retention_ms)).add_done_callback(
                        _consume_result)

    def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` on first use, as Kafka does, and start its shards."""
        if self.replicas.topic(OFFSETS_TOPIC) is None:
            self.replicas.create_topic(
                OFFSETS_TOPIC,
                self.config["offsets.topic.num.partitions"],
                {"cleanup.policy": "compact", "segment.bytes": self.config["offsets.topic.segment.bytes"]},
                internal=True,
            )
        if not self.shards:
            self._start_shards()

    def _start_shards(self) -> None:
        topic = self.replicas.topic(OFFSETS_TOPIC)
        assert topic is not None
        for index in range(topic.partitions):
            partition = self.replicas.partition(OFFSETS_TOPIC, index)
            assert partition is not None
            shard = CoordinatorShard(index, self.shard_config, self._partition_exists)
            runtime = self.shards[index] = ShardRuntime(self, partition, shard)
            runtime.start()

    async def stop(self) -> None:
        if self._expiry_task is not None:
            self._expiry_task.cancel()
            await asyncio.gather(self._expiry_task, return_exceptions=True)
        await asyncio.gather(*(shard.stop() for shard in self.shards.values()))
        for future in self._waiting.values():
            if not future.done():
                future.cancel()

    def _partition_exists(self, topic: str, partition: int) -> bool:
        return self.replicas.partition(topic, partition) is not None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> ShardRuntime:
        """The shard serving `group_id`, or ShardNotAvailable with the code to answer."""
        self.ensure_offsets_topic()
        return self.shards[self.partition_for(group_id)]

    # -- requests -----------------------------------------------------------------------------

    def new_token(self) -> tuple[int, asyncio.Future[Any]]:
        """A token naming one request, and the future its response will be released into."""
        token = next(self._tokens)
        future = self._waiting[token] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda _f, t=token: self._waiting.pop(t, None))
        return token, future

    def release(self, result: Result) -> None:
        for token, response in result.responses.items():
            future = self._waiting.get(token)
            if future is not None and not future.done():
                future.set_result(response)

    async def call(self, group_id: str, event: Callable[[CoordinatorShard, int, int], Result],
                   error_response: Callable[[ErrorCode], Any]) -> Any:
        """Run `event(shard, token, now)` on the group's shard and await this request's response
        (which may be released by a later event, e.g. a JoinGroup completed by another member)."""
        try:
            shard = self.shard_for(group_id)
            token, response = self.new_token()
            handled = shard.submit(lambda s, now: event(s, token, now))
        except ShardNotAvailable as exc:
            return error_response(exc.code)
        try:
            await handled  # raises if the handler failed: the dispatcher answers UNKNOWN_SERVER_ERROR
        finally:
            if not response.done() and handled.done() and handled.exception() is not None:
                response.cancel()
        return await response

    def read(self, group_id: str, reader: Callable[[CoordinatorShard], Any],
             error_response: Callable[[ErrorCode], Any]) -> Any:
        """A read of committed state (OffsetFetch, DescribeGroups): no queue, no records."""
        try:
            shard = self.shard_for(group_id)
        except ShardNotAvailable as exc:
            return error_response(exc.code)
        if shard.state is LoadState.LOADING:
            return error_response(ErrorCode.coordinator_load_in_progress)
        if shard.state is LoadState.FAILED:
            return error_response(ErrorCode.coordinator_not_available)
        return reader(shard.shard)
