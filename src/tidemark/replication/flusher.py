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
stalled ZooKeeper call could hold every thread) nor on the event loop. The thread runs its rounds
by itself: an append marks its partition dirty and sets the thread's event, and the thread, once
a round ends, hands its results to the event loop (`call_soon_threadsafe`) and starts the next
round at once with whatever was marked meanwhile. The loop is not asked for each round, so a
round no longer waits for the loop to take the last one's results and submit the next (on a busy
machine that hop, two thread wake-ups and the loop's turn, took longer than the fsync itself). A round with several logs
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
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import structlog

from tidemark import metrics
from tidemark.replication.partition import Partition

log = structlog.get_logger("tidemark.flusher")


class Flusher:
    def __init__(self, replica_flush_interval_ms: int = 0, flush_threads: int = 1) -> None:
        # Flushed in the next round; shared with the disk thread (under _lock).
        self._dirty: dict[int, Partition] = {}
        self._truncations: list[tuple[list[Partition], asyncio.Future[list[BaseException | None]]]] = []
        self._lock = threading.Lock()
        self._work = threading.Event()  # set: something for the disk thread
        self._replicated: dict[int, Partition] = {}  # replicated in sync: flushed within the interval
        self._replica_flush_interval_s = replica_flush_interval_ms / 1000
        self._replica_timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._flush_threads = flush_threads
        self._fsyncs: ThreadPoolExecutor | None = None  # a round's logs synced side by side

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._work = threading.Event()  # the thread of an earlier start keeps its own, set by stop
        if self._dirty:
            self._work.set()  # marked before the start
        if self._flush_threads > 1:
            self._fsyncs = ThreadPoolExecutor(max_workers=self._flush_threads, thread_name_prefix="tidemark-fsync")
        # One thread: rounds run one after another (a round waits for the previous one).
        self._thread = threading.Thread(target=self._disk_loop, args=(self._work,), name="tidemark-disk", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        if self._replica_timer is not None:
            self._replica_timer.cancel()
            self._replica_timer = None
        # A round still fsyncing finishes on its own (its results go nowhere once the loop is
        # gone); the logs' close flushes again anyway.
        self._thread = None  # the disk thread ends at its next wake-up
        self._work.set()
        with self._lock:
            truncations, self._truncations = self._truncations, []
        for _, future in truncations:
            if not future.done():
                future.cancel()
        if self._fsyncs is not None:
            self._fsyncs.shutdown(wait=False, cancel_futures=True)
            self._fsyncs = None

    def mark_dirty(self, partition: Partition) -> None:
        self._replicated.pop(id(partition), None)
        with self._lock:
            self._dirty[id(partition)] = partition
        # Set already, the disk thread has not taken the dirty logs yet (it clears the event and
        # takes them under the lock): it takes this one too. Event.set takes a lock and notifies
        # even when set.
        if not self._work.is_set():
            self._work.set()

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
        with self._lock:
            self._dirty.pop(id(partition), None)
        self._replicated.pop(id(partition), None)

    async def sync_truncations(self, partitions: list[Partition]) -> list[BaseException | None]:
        """Make the truncations of `partitions` durable (UnifiedLog.sync_truncation) on the disk
        thread, after the round running now: what each failed with, or None. The fetcher
        awaits it before fetching those partitions on."""
        if self._thread is None or self._loop is None:
            raise RuntimeError("the flusher is not running")
        future: asyncio.Future[list[BaseException | None]] = self._loop.create_future()
        with self._lock:
            self._truncations.append((partitions, future))
        self._work.set()
        return await future

    # -- the disk thread ----------------------------------------------------------------------

    def _disk_loop(self, work: threading.Event) -> None:
        while True:
            work.wait()
            if self._thread is not threading.current_thread():
                return  # stopped (and perhaps started again, with a thread of its own)
            with self._lock:
                work.clear()
                batch, self._dirty = list(self._dirty.values()), {}
                truncations, self._truncations = self._truncations, []
            try:
                # Truncations asked for during the last round first ("after the round running now").
                for partitions, future in truncations:
                    self._post(_resolve, future, _sync_truncations(partitions))
                if batch:
                    started = time.perf_counter()
                    results = _flush_all(batch, self._fsyncs)
                    metrics.FLUSH_SECONDS.observe(time.perf_counter() - started)
                    self._post(self._flushed, batch, results)
            except Exception:  # noqa: BLE001 - the thread must outlive a bug: every round after it counts
                log.exception("flusher_round_failed")

    def _post(self, callback, *args) -> None:  # type: ignore[no-untyped-def]
        loop = self._loop
        if loop is None or self._thread is not threading.current_thread():
            return
        try:
            loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed under a last round: nothing waits for it any more
            pass

    def _flushed(self, batch: list[Partition], results: list[int | BaseException]) -> None:
        """A round's results, on the event loop."""
        for partition, result in zip(batch, results):
            if isinstance(result, BaseException):
                log.error("flush_failed", topic=partition.topic, partition=partition.index, error=repr(result))
                partition.fail_waiters(result)
                continue
            partition.flushed_to(result)


def _resolve(future: asyncio.Future[list[BaseException | None]], result: list[BaseException | None]) -> None:
    if not future.done():
        future.set_result(result)


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
