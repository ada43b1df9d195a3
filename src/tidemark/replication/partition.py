"""A partition on this broker: its log, its replicas, its high watermark and who waits on it.

The high watermark is the smallest log end offset over the in-sync replicas (Kafka's
Partition.maybeIncrementLeaderHW): a follower's counts once its fetch asks for the offset after
it. This broker's own end counts as appended while another replica is in sync, as in Kafka
(durability across brokers is replication; logs are fsynced in rounds), and only up to its log's
recovery point (what is fsynced: the one record of it, lowered by truncation; the flusher calls
`flushed_to` after each fsync) while it is alone in the ISR, so an acknowledged write is always
on two replicas or on disk. On one broker the ISR is just this broker, so the high watermark is
the durably flushed end of the log. The ISR the high watermark counts is the maximal ISR (Kafka's
KIP-497): the stored ISR plus every replica this leader has asked ZooKeeper to add, and still
every replica it has asked to remove, until it learns the ISR as stored (its write's answer, or
a new state in the view); a replica ZooKeeper may already list, which the controller may elect,
is never behind what this leader commits. Every path that acknowledges a committed write (acks=-1,
offset commits) waits on the high watermark, never on the write call.

A follower's high watermark is what its leader last reported, never past its own log end.

A write waiting to be acknowledged is tied to the leadership that appended it (Kafka's
DelayedProduce): once this broker stops leading (it follows, has no leader, the partition is
deleted or the broker stops) the wait fails with NOT_LEADER_OR_FOLLOWER, since another leader's
high watermark says nothing of records this one appended, and a later leadership of this broker
may have truncated them as a follower in between. A higher epoch with this broker still leading
(the controller bumps the epoch at every ISR change it makes) continues the same leadership:
its log was never truncated, so its waits go on, as Kafka's do. Leadership only moves to higher
epochs: an older or conflicting view is ignored.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import structlog

from tidemark.log.unified_log import UnifiedLog
from tidemark.replication.errors import NotLeaderOrFollowerError

log = structlog.get_logger("tidemark.partition")


@dataclasses.dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's Replica): its log end from its last fetch,
    and the last time it was caught up with the leader's log end."""

    log_end_offset: int = -1  # unknown until it fetches: a dead follower never looks caught up
    log_start_offset: int = -1  # as its fetches report it (KIP-392: whether it holds a consumer's offset)
    last_caught_up_ms: int = 0
    # The leader's log end at the follower's previous fetch: fetching from there since means
    # it was caught up then (Kafka's lastFetchLeaderLogEndOffset).
    leader_end_at_last_fetch: int = 0
    last_fetch_ms: int = 0
    # Only a follower that fetched since it left the ISR may rejoin it (Kafka expands the ISR
    # on a follower's fetch): a dead one's last fetch must not bring it back.
    fetched_out_of_isr: bool = False


class Partition:
    def __init__(self, topic: str, index: int, log: UnifiedLog, leader_epoch: int = 0, local_id: int = 0) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self.local_id = local_id
        # Who leads and who replicates (on one broker: this broker alone, at epoch 0).
        self.leader_id: int | None = local_id
        self.leader_epoch = leader_epoch
        # The epoch this broker's current leadership began at (None: not leading): waits tied to
        # an epoch from there to leader_epoch are this leadership's.
        self._led_since: int | None = leader_epoch
        self.replicas: tuple[int, ...] = (local_id,)
        self.isr: frozenset[int] = frozenset({local_id})
        # The ISRs this leader asked ZooKeeper for since it last learned the stored one: their
        # replicas count for the high watermark (see maximal_isr) whether or not the write took.
        self._isr_asked: frozenset[int] = frozenset()
        # The last ISR asked for, until the stored one is learned: the ISR loop asks again (as
        # Kafka resends its AlterPartition), so a write lost without a trace cannot leave a
        # replica that never fetches again holding the high watermark for good.
        self.isr_unconfirmed: frozenset[int] | None = None
        self.zk_version = 0
        self.leader_epoch_start_offset = 0
        self.followers: dict[int, FollowerState] = {}
        # Each waiter's target offset and the leader epoch it is tied to (None: any leader's
        # high watermark will do, as for a replica replaying committed records). A waiter leaves
        # as soon as it is done, cancelled included.
        self._hw_waiters: dict[asyncio.Future[None], tuple[int, int | None]] = {}
        # One future shared by every long-poll fetch of this partition, replaced at each
        # advance: waiters that time out leave nothing behind.
        self._advanced: asyncio.Future[None] | None = None
        self._appended: asyncio.Future[None] | None = None  # the same, for followers' fetches
        # Told of every append and high watermark advance (`appended` says which): followers'
        # fetch sessions visit only the partitions that changed (fetch_sessions.py).
        self.change_listener: Callable[[Partition, bool], None] | None = None

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The stored ISR and every replica of an ISR write not yet confirmed (KIP-497)."""
        return self.isr | self._isr_asked

    @property
    def has_in_sync_followers(self) -> bool:
        """Another replica is in the ISR: this broker's appends count before they are fsynced."""
        return len(self.isr) > 1

    # -- roles ------------------------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: tuple[int, ...], isr: frozenset[int], zk_version: int,
                      now_ms: int) -> bool:
        """Lead at `leader_epoch`: followers start as caught up now (they get
        replica.lag.time.max.ms to show they are), at an unknown log end (Kafka's -1: on an empty
        partition a log end of 0 would put a follower that never fetches back into the ISR).
        Already leading (a new epoch for an ISR change), its waiting writes go on. False, with
        nothing changed, for an epoch not above the current one (see `_takes`)."""
        if not self._takes(self.local_id, leader_epoch):
            return False
        if not self.is_leader:
            self._fail_tied_waiters(leader_epoch)  # none: a follower has none
            self._led_since = leader_epoch
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = self.log.log_end_offset  # a follower rejoins only past it
        self.log.assign_epoch_start_offset(leader_epoch)
        self.replicas = replicas
        self.isr = isr
        self._isr_asked, self.isr_unconfirmed = frozenset(), None
        self.zk_version = zk_version
        self.followers = {replica: FollowerState(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
                          for replica in replicas if replica != self.local_id}
        self._maybe_advance_high_watermark()
        return True

    def become_follower(self, leader_id: int | None, leader_epoch: int, replicas: tuple[int, ...],
                        isr: frozenset[int], zk_version: int) -> bool:
        """Follow `leader_id` (None: no leader) at `leader_epoch`; writes waiting under this
        broker's leadership fail. False, with nothing changed, for a stale or conflicting
        leadership (see `_takes`)."""
        if not self._takes(leader_id, leader_epoch):
            return False
        self._fail_tied_waiters(leader_epoch)
        self._led_since = None
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.isr = isr
        self._isr_asked, self.isr_unconfirmed = frozenset(), None
        self.zk_version = zk_version
        self.followers = {}
        return True

    def _takes(self, leader_id: int | None, leader_epoch: int) -> bool:
        """Whether this partition takes the leadership (`leader_id`, `leader_epoch`): only at a
        higher epoch, or at the same one to lose its leader (an epoch names one leader: another
        at the same epoch is a conflicting view, and the one it has is not changed by a repeat)."""
        if leader_epoch > self.leader_epoch or (leader_epoch == self.leader_epoch and leader_id is None
                                                 and self.leader_id is not None):
            return True
        if leader_epoch < self.leader_epoch or leader_id != self.leader_id:
            log.warning("stale_leadership_ignored", topic=self.topic, partition=self.index, leader=leader_id,
                        epoch=leader_epoch, current_leader=self.leader_id, current_epoch=self.leader_epoch)
        return False

    def isr_write_pending(self, wanted: frozenset[int]) -> None:
        """This leader is about to ask ZooKeeper for ISR `wanted`: from now until it learns the
        stored ISR (`update_isr`, or a new role), the high watermark counts `wanted`'s replicas
        too. A write refused or failed leaves it so (Kafka keeps its pending state until it
        learns the real one): the write may have taken, and a retry asks for the same."""
        self._isr_asked |= wanted
        self.isr_unconfirmed = wanted

    def update_isr(self, isr: frozenset[int], zk_version: int) -> None:
        """The ISR as now stored (by this leader's own write, or read back): no write of this
        leader is pending any more."""
        for replica, state in self.followers.items():
            if replica not in isr:
                state.fetched_out_of_isr = False
        self.isr = isr
        self._isr_asked, self.isr_unconfirmed = frozenset(), None
        self.zk_version = zk_version
        self._maybe_advance_high_watermark()

    # -- the leader's view of its followers -------------------------------------------------------

    def follower_fetched(self, replica_id: int, fetch_offset: int, now_ms: int, log_start_offset: int = -1) -> None:
        """A follower fetches from `fetch_offset`: everything below it is in its log (and from
        `log_start_offset`, when its fetch names it)."""
        state = self.followers.get(replica_id)
        if state is None:
            return  # not a replica of this partition (or this broker does not lead it)
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            state.last_caught_up_ms = now_ms
        elif fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        moved = fetch_offset != state.log_end_offset
        state.log_end_offset = fetch_offset
        state.leader_end_at_last_fetch = leader_end
        state.last_fetch_ms = now_ms
        state.fetched_out_of_isr = replica_id not in self.isr
        if moved:  # otherwise the high watermark has nothing new to go by (a session's idle partitions)
            self._maybe_advance_high_watermark()

    def isr_to_expand(self) -> frozenset[int] | None:
        """The ISR with every follower that caught up to the high watermark, by a fetch made
        while out of the ISR, added (Kafka's maybeExpandIsr), or None when nobody rejoins."""
        joining = {replica for replica, state in self.followers.items()
                   if replica not in self.isr and state.fetched_out_of_isr
                   and state.log_end_offset >= self.high_watermark
                   and state.log_end_offset >= self.leader_epoch_start_offset}
        return self.isr | joining if joining else None

    def isr_to_shrink(self, now_ms: int, lag_time_max_ms: int) -> frozenset[int] | None:
        """The ISR without followers not caught up for replica.lag.time.max.ms, or None."""
        leaving = {replica for replica in self.isr if replica != self.local_id
                   and (state := self.followers.get(replica)) is not None
                   and now_ms - state.last_caught_up_ms > lag_time_max_ms}
        return self.isr - leaving if leaving else None

    # -- high watermark ---------------------------------------------------------------------------

    def flushed_to(self, end: int) -> None:
        """The flusher fsynced this replica's log (up to `end` then): a leader alone in its ISR
        counts its own end up to the log's recovery point, which a truncation since may have
        lowered below `end`."""
        self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        if not self.is_leader:
            return
        # Its own end counts unflushed only while the stored ISR has another replica: a replica
        # only asked for may never be listed.
        high_watermark = self.log.log_end_offset if self.has_in_sync_followers else self.log.recovery_point
        for replica in self.maximal_isr:
            if replica != self.local_id:
                state = self.followers.get(replica)
                high_watermark = min(high_watermark, max(state.log_end_offset, 0) if state is not None else 0)
        self._advance_high_watermark(high_watermark)

    def leader_high_watermark(self, high_watermark: int) -> None:
        """A follower learns the leader's high watermark (bounded by its own log end)."""
        self._advance_high_watermark(min(high_watermark, self.log.log_end_offset))

    def _advance_high_watermark(self, offset: int) -> None:
        if offset <= self.log.high_watermark:
            return
        self.log.update_high_watermark(offset)
        reached = [future for future, (target, _) in self._hw_waiters.items() if offset >= target]
        for future in reached:
            del self._hw_waiters[future]
            if not future.done():
                future.set_result(None)
        # Consumers' long polls only: a follower's (min_bytes 1) waits for records, and waking it
        # on every advance would only make it read again and find none.
        self._wake_consumers()
        if self.change_listener is not None:
            self.change_listener(self, False)

    def wait_for_high_watermark(self, target: int, leader_epoch: int | None = None) -> asyncio.Future[None]:
        """A future done once the high watermark reaches `target` (an exclusive end offset),
        under the leadership that appended the records: this broker's, led without a break
        since `leader_epoch` (by default the epoch it leads at now). It fails with
        NotLeaderOrFollowerError if that leadership is over, now or before the target is reached."""
        epoch = self.leader_epoch if leader_epoch is None else leader_epoch
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._led_since is None or not self._led_since <= epoch <= self.leader_epoch:
            future.set_exception(self._not_leader(epoch))
        elif self.log.high_watermark >= target:
            future.set_result(None)
        else:
            self._add_waiter(future, target, epoch)
        return future

    def watch_high_watermark(self, target: int) -> asyncio.Future[None]:
        """A future done once the high watermark reaches `target`, whoever leads (a replica
        replaying what is committed, leading or not); failed only by `fail_waiters`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.log.high_watermark >= target:
            future.set_result(None)
        else:
            self._add_waiter(future, target, None)
        return future

    @property
    def waiter_count(self) -> int:
        return len(self._hw_waiters)

    def _add_waiter(self, future: asyncio.Future[None], target: int, epoch: int | None) -> None:
        self._hw_waiters[future] = (target, epoch)
        # A cancelled wait (a produce that timed out) leaves at once, not at the next advance.
        future.add_done_callback(self._waiter_done)

    def _waiter_done(self, future: asyncio.Future[None]) -> None:
        self._hw_waiters.pop(future, None)

    def _not_leader(self, epoch: int) -> NotLeaderOrFollowerError:
        return NotLeaderOrFollowerError(
            f"{self.topic}-{self.index}: no longer led here at epoch {epoch} (leader {self.leader_id}, "
            f"epoch {self.leader_epoch})")

    def _fail_tied_waiters(self, new_epoch: int) -> None:
        """This broker's leadership ends: every write waiting under it fails (Kafka completes
        its DelayedProduce with NOT_LEADER_OR_FOLLOWER)."""
        tied = [(future, epoch) for future, (_, epoch) in self._hw_waiters.items() if epoch is not None]
        for future, epoch in tied:
            del self._hw_waiters[future]
            if not future.done():
                future.set_exception(NotLeaderOrFollowerError(
                    f"{self.topic}-{self.index}: appended at leader epoch {epoch}, now epoch {new_epoch}"))

    def watch(self, appends: bool = False) -> asyncio.Future[None]:
        """A future done at the next high watermark advance (wakes long-poll fetches), or with
        `appends` at the next append (wakes followers' fetches, which read up to the log end).

        Shared between callers: await it (or asyncio.wait on it) but never cancel it."""
        if appends:
            if self._appended is None:
                self._appended = asyncio.get_running_loop().create_future()
            return self._appended
        if self._advanced is None:
            self._advanced = asyncio.get_running_loop().create_future()
        return self._advanced

    def appended(self) -> None:
        """Records were appended to this partition's log."""
        appended, self._appended = self._appended, None
        if appended is not None and not appended.done():
            appended.set_result(None)
        if self.change_listener is not None:
            self.change_listener(self, True)

    def _wake_consumers(self) -> None:
        advanced, self._advanced = self._advanced, None
        if advanced is not None and not advanced.done():
            advanced.set_result(None)

    def fail_waiters(self, exc: BaseException) -> None:
        """Fail every high watermark waiter, tied to a leadership or not (the log failed, the
        partition was deleted, the broker stops), and wake the fetches waiting on it."""
        waiters, self._hw_waiters = list(self._hw_waiters), {}
        for future in waiters:
            if not future.done():
                future.set_exception(exc)
        self._wake_consumers()
        self.appended()
