"""Group commit: one task fsyncs every log with unflushed appends, then reports how far each is durable.

Producers that arrive while an fsync is running share the next one, so durability costs one
fsync per round rather than one per request, and throughput is not serialised behind the disk.

Appends to a partition replicated in sync (a follower's, or a leader's while followers are in
its ISR) wait up to tidemark.replica.flush.interval.ms before their round: the high watermark
counts them once appended (durability across brokers is replication, as in Kafka), so fsyncing
each one bought nothing but CPU and disk time taken from the commits being replicated. A leader
alone in its ISR (just elected, or its followers dropped out) is flushed at once: its own end
counts only once durable.

The fsyncs run on the flusher's own disk thread, never on asyncio's default executor (where a
stalled ZooKeeper call could hold every thread) nor on the event loop. A round with several logs
to sync hands them to a few fsync threads at once (tidemark.log.flush.threads): the disk takes
concurrent fsyncs of different files in about the time of one, so a round costs one fsync's wait
rather than one per dirty partition, and every commit waiting on it (a transaction's
coordinator, offsets and data partitions, several producers' partitions) is answered sooner. A log's flush also
writes and fsyncs what must be durable before its recovery point moves (its leader epoch
checkpoint, the producer snapshots taken at rolls), and a follower's truncation is made durable
there too (`sync_truncations`, awaited by the fetcher), so none of them costs the event loop
a write or an fsync.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import structlog

from tidemark import metrics
from tidemark.replication.partition import Partition

log = structlog.get_logger("tidemark.flusher")


class Flusher:
    def __init__(self, replica_flush_interval_ms: int = 0, flush_threads: int = 1) -> None:
        self._dirty: dict[int, Partition] = {}  # flushed in the next round
        self._replicated: dict[int, Partition] = {}  # replicated in sync: flushed within the interval
        self._replica_flush_interval_s = replica_flush_interval_ms / 1000
        self._replica_timer: asyncio.TimerHandle | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._disk: ThreadPoolExecutor | None = None
        self._flush_threads = flush_threads
        self._fsyncs: ThreadPoolExecutor | None = None  # a round's logs synced side by side

    def start(self) -> None:
        # One thread: rounds run one after another (a round waits for the previous one).
        self._disk = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidemark-disk")
        if self._flush_threads > 1:
            self._fsyncs = ThreadPoolExecutor(max_workers=self._flush_threads, thread_name_prefix="tidemark-fsync")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="flusher")

    async def stop(self) -> None:
        if self._replica_timer is not None:
            self._replica_timer.cancel()
            self._replica_timer = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._disk is not None:
            # A round still fsyncing finishes on its own; the logs' close flushes again anyway.
            self._disk.shutdown(wait=False, cancel_futures=True)
            self._disk = None
        if self._fsyncs is not None:
            self._fsyncs.shutdown(wait=False, cancel_futures=True)
            self._fsyncs = None

    def mark_dirty(self, partition: Partition) -> None:
        self._replicated.pop(id(partition), None)
        self._dirty[id(partition)] = partition
        self._wakeup.set()

    def mark_replicated(self, partition: Partition) -> None:
        """`partition` was appended to while replicated in sync: flush it within the replica
        flush interval."""
        if id(partition) in self._dirty:
            return
        self._replicated[id(partition)] = partition
        if self._replica_timer is None:
            self._replica_timer = asyncio.get_running_loop().call_later(self._replica_flush_interval_s,
                                                                        self._flush_replicated)

    def _flush_replicated(self) -> None:
        self._replica_timer = None
        replicated, self._replicated = self._replicated, {}
        for partition in replicated.values():
            self.mark_dirty(partition)

    def forget(self, partition: Partition) -> None:
        self._dirty.pop(id(partition), None)
        self._replicated.pop(id(partition), None)

    async def sync_truncations(self, partitions: list[Partition]) -> list[BaseException | None]:
        """Make the truncations of `partitions` durable (UnifiedLog.sync_truncation) on the disk
        thread, after the round running now: what each failed with, or None. The fetcher
        awaits it before fetching those partitions on."""
        if self._disk is None:
            raise RuntimeError("the flusher is not running")
        return await asyncio.get_running_loop().run_in_executor(self._disk, _sync_truncations, partitions)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            batch, self._dirty = list(self._dirty.values()), {}
            started = time.perf_counter()
            # One hop to a worker thread per round, however many partitions are dirty.
            results = await asyncio.get_running_loop().run_in_executor(self._disk, _flush_all, batch, self._fsyncs)
            metrics.FLUSH_SECONDS.observe(time.perf_counter() - started)
            for partition, result in zip(batch, results):
                if isinstance(result, BaseException):
                    log.error("flush_failed", topic=partition.topic, partition=partition.index, error=repr(result))
                    partition.fail_waiters(result)
                    continue
                partition.flushed_to(result)


def _flush_one(partition: Partition) -> int | BaseException:
    try:
        return partition.log.flush()
    except Exception as exc:  # noqa: BLE001 - reported per partition by the caller
        return exc


def _flush_all(partitions: list[Partition], fsyncs: ThreadPoolExecutor | None = None) -> list[int | BaseException]:
    """Each log's durable end (or what its flush failed with), in order; with `fsyncs`, the logs
    are synced side by side and the round ends when the last is durable."""
    if fsyncs is None or len(partitions) < 2:
        return [_flush_one(partition) for partition in partitions]
    return list(fsyncs.map(_flush_one, partitions))


def _sync_truncations(partitions: list[Partition]) -> list[BaseException | None]:
    results: list[BaseException | None] = []
    for partition in partitions:
        try:
            partition.log.sync_truncation()
            results.append(None)
        except Exception as exc:  # noqa: BLE001 - reported per partition by the caller
            results.append(exc)
    return results
