"""The coordinator runtime over an in-memory offsets partition and a manual clock: the load
state table, leadership hooks, loading to the current high watermark, commits and timers."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from tidemark.coordinator.runtime.runtime import (
    LOAD_RETRY_BACKOFF_MS,
    IllegalLoadTransition,
    LoadState,
)
from tidemark.coordinator.result import OffsetsRecord
from tidemark.records.offsets_schema import OffsetCommitKey, OffsetCommitValue, encode_key, \
    encode_offset_commit_value


def _offset_record(offset: int, group: str = "g", partition: int = 0) -> OffsetsRecord:
    value = OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp=1, expire_timestamp=-1)
    return OffsetsRecord(encode_key(OffsetCommitKey(group, "orders", partition)), encode_offset_commit_value(value))


async def _held_join(h):
    """A JoinGroup the coordinator holds: the first member waits out the initial delay."""
    member = (await h.join())["member_id"]  # MEMBER_ID_REQUIRED hands out the id
    held = h.join(member)
    await h.settle()
    return held


def test_commit_times_out_without_trace_then_succeeds_once_durable(coordinator_harness):
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False  # appends are not committed until the test says so
        pending = asyncio.ensure_future(h.commit(41))
        await h.settle()
        assert not pending.done()
        h.clock.advance(199)
        await h.settle()
        assert not pending.done()  # offsets.commit.timeout.ms is 200: not yet
        h.clock.advance(1)
        await h.settle()
        assert h.commit_code(pending.result()) == ErrorCode.request_timed_out
        assert await h.fetch() == (ErrorCode.none, -1)  # the timed-out commit left no trace in the cache
        h.writer.auto_commit = True
        assert h.commit_code(await h.commit(42)) == ErrorCode.none
        assert await h.fetch() == (ErrorCode.none, 42)

    coordinator_harness(scenario, offsets_commit_timeout_ms="200")


def test_load_state_transitions_are_checked(coordinator_harness):
    async def scenario(h):
        await h.start()
        runtime = h.shard
        assert runtime.state is LoadState.ACTIVE
        with pytest.raises(IllegalLoadTransition):
            runtime.transition_to(LoadState.LOADING)  # ACTIVE -> LOADING skips the unload
        with pytest.raises(IllegalLoadTransition):
            runtime.transition_to(LoadState.FAILED)

    coordinator_harness(scenario)


def test_requests_get_kafkas_code_for_each_inactive_state(coordinator_harness):
    async def scenario(h):
        h.topic.create()
        h.coordinator.start()
        assert h.shard.state is LoadState.LOADING  # the load task has not run yet
        assert await h.fetch() == (ErrorCode.coordinator_load_in_progress, -1)
        assert h.commit_code(await h.commit(1)) == ErrorCode.coordinator_load_in_progress
        await h.settle()
        assert h.commit_code(await h.commit(1)) == ErrorCode.none
        h.shard.resigned(0)
        assert h.shard.state is LoadState.UNLOADED
        assert await h.fetch() == (ErrorCode.not_coordinator, -1)
        assert h.commit_code(await h.commit(2)) == ErrorCode.not_coordinator

    coordinator_harness(scenario)


def test_failed_load_is_retried_with_back_off(coordinator_harness):
    async def scenario(h):
        h.topic.create()
        h.writer.records.append((_offset_record(7).key, _offset_record(7).value))
        h.writer.commit()
        h.writer.fail_reads = 2
        h.coordinator.start()
        await h.settle()
        assert h.shard.state is LoadState.FAILED
        assert await h.fetch() == (ErrorCode.not_coordinator, -1)
        h.clock.advance(LOAD_RETRY_BACKOFF_MS)  # first retry fails again
        await h.settle()
        assert h.shard.state is LoadState.FAILED
        h.clock.advance(2 * LOAD_RETRY_BACKOFF_MS - 1)  # the back-off doubled
        await h.settle()
        assert h.shard.state is LoadState.FAILED
        h.clock.advance(1)
        await h.settle()
        assert h.shard.state is LoadState.ACTIVE
        assert await h.fetch() == (ErrorCode.none, 7)

    coordinator_harness(scenario)


def test_load_reads_on_to_the_current_high_watermark(coordinator_harness):
    async def scenario(h):
        h.topic.create()
        writer = h.writer
        for offset in (1, 2, 3):
            record = _offset_record(offset)
            writer.records.append((record.key, record.value))
        writer.commit(to=1)

        def flushed_meanwhile(w):  # the high watermark moves while the load runs
            w.on_read = None
            w.commit()

        writer.on_read = flushed_meanwhile
        h.coordinator.start()
        await h.settle()
        assert h.shard.state is LoadState.ACTIVE
        assert await h.fetch() == (ErrorCode.none, 3)

    coordinator_harness(scenario)


def test_a_leadership_serves_once_the_tail_its_log_began_with_is_committed(coordinator_harness):
    """The record above the high watermark may be a commit an earlier leader acknowledged (a
    follower's high watermark trails its leader's): reads and events wait for it, never answer
    from before it, and never answer COORDINATOR_LOAD_IN_PROGRESS for it."""
    async def scenario(h):
        h.topic.create()
        writer = h.writer
        for offset in (1, 2):
            record = _offset_record(offset)
            writer.records.append((record.key, record.value))
        writer.commit(to=1)  # the second commit is written (by an earlier leadership) but not durable here
        h.coordinator.start()
        await h.settle()
        assert h.shard.state is LoadState.ACTIVE
        fetch = asyncio.ensure_future(h.fetch())
        commit = asyncio.ensure_future(h.commit(3, partition=1))
        await h.settle()
        assert not fetch.done() and not commit.done()
        writer.commit()
        await h.settle()
        assert fetch.result() == (ErrorCode.none, 2)
        assert h.commit_code(commit.result()) == ErrorCode.none
        assert await h.fetch(partition=1) == (ErrorCode.none, 3)

    coordinator_harness(scenario)


def test_unload_answers_held_join_and_stale_epochs_are_ignored(coordinator_harness):
    async def scenario(h):
        await h.start()
        held = await _held_join(h)
        assert not held.done()
        h.shard.became_leader(0)  # the same leadership again: nothing happens
        assert h.shard.state is LoadState.ACTIVE and not held.done()
        h.shard.resigned(0)
        await h.settle()
        assert held.result()["error_code"] == ErrorCode.not_coordinator
        h.shard.became_leader(1)
        await h.settle()
        assert h.shard.state is LoadState.ACTIVE
        h.shard.resigned(0)  # a stale unload finishing after the newer load
        assert h.shard.state is LoadState.ACTIVE
        assert h.commit_code(await h.commit(5)) == ErrorCode.none

    coordinator_harness(scenario, group_initial_rebalance_delay_ms="3000")


def test_stopping_answers_held_join_with_not_coordinator(coordinator_harness):
    async def scenario(h):
        await h.start()
        held = await _held_join(h)
        assert not held.done()
        await h.coordinator.stop()
        await h.settle()
        assert held.result()["error_code"] == ErrorCode.not_coordinator

    coordinator_harness(scenario, group_initial_rebalance_delay_ms="3000")


def test_deleting_the_offsets_topic_unloads_until_it_is_created_again(coordinator_harness):
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(9)) == ErrorCode.none
        h.topic.delete()
        assert await h.fetch() == (ErrorCode.not_coordinator, -1)  # not the stale cache
        assert h.commit_code(await h.commit(10)) == ErrorCode.not_coordinator
        h.coordinator.ensure_offsets_topic()  # FindCoordinator creates it again
        assert await h.fetch() == (ErrorCode.coordinator_load_in_progress, -1)
        await h.settle()
        assert await h.fetch() == (ErrorCode.none, -1)  # loaded afresh from the new, empty log

    coordinator_harness(scenario)


def test_session_expires_on_the_timer_exactly_at_its_deadline(coordinator_harness):
    async def scenario(h):
        await h.start()
        first = h.join()
        await h.settle()
        member = first.result()["member_id"]  # MEMBER_ID_REQUIRED hands out the id
        joined = h.join(member, session_ms=6000)
        await h.settle()
        h.clock.advance(0)  # no initial delay: the join completes on the timer event
        await h.settle()
        assert joined.result()["error_code"] == ErrorCode.none
        group = h.shard.shard.groups["g"]
        assert member in group.members
        h.clock.advance(6000 - 1)
        await h.settle()
        assert member in group.members
        h.clock.advance(1)
        await h.settle()
        assert member not in group.members

    coordinator_harness(scenario, group_initial_rebalance_delay_ms="0")


def test_a_commit_committed_while_too_few_replicas_are_in_sync_is_not_acknowledged(coordinator_harness):
    """The ISR shrank below min.insync.replicas after the append: the write commits with the
    leader alone, and the commit is answered as Kafka answers NOT_ENOUGH_REPLICAS_AFTER_APPEND
    (COORDINATOR_NOT_AVAILABLE), though the record, being in the log, is still replayed."""
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False
        pending = asyncio.ensure_future(h.commit(5))
        await h.settle()
        h.writer.isr_below_min = True
        h.writer.commit()
        await h.settle()
        assert h.commit_code(pending.result()) == ErrorCode.coordinator_not_available
        assert await h.fetch() == (ErrorCode.none, 5)

    coordinator_harness(scenario)


def test_a_fenced_coordinator_answers_not_coordinator_and_reloads_from_the_log_when_it_leads_again(
        coordinator_harness):
    """While the broker may not lead (its ZooKeeper session suspended, lost or its lease lapsed),
    reads and writes answer NOT_COORDINATOR, whether or not the shard has unloaded yet; relead
    loads the partition afresh, so what the log gained meanwhile is served, not the old cache."""
    async def scenario(h):
        await h.start()
        assert h.commit_code(await h.commit(5)) == ErrorCode.none
        leading = [True]
        h.coordinator.may_lead = lambda: leading[0]
        leading[0] = False  # the lease ended; the broker has not run fence() yet
        assert await h.fetch() == (ErrorCode.not_coordinator, -1)
        assert h.commit_code(await h.commit(6)) == ErrorCode.not_coordinator
        h.coordinator.fence()
        assert h.shard.state is LoadState.UNLOADED and h.coordinator.fenced_leaderships() == {0: 0}
        h.writer.append([_offset_record(9)], 0)  # written by the leader that took over meanwhile
        h.coordinator.relead(0, 0)  # a relead while still fenced loads nothing
        assert h.shard.state is LoadState.UNLOADED
        leading[0] = True
        h.coordinator.relead(0, 0)
        await h.settle()
        assert h.shard.state is LoadState.ACTIVE
        assert await h.fetch() == (ErrorCode.none, 9)

    coordinator_harness(scenario)


def test_an_event_queued_before_the_lease_ended_is_answered_not_coordinator(coordinator_harness):
    """A request accepted just before the broker was paused runs after it resumes, before the
    fence: it is answered NOT_COORDINATOR, not decided on the old state."""
    async def scenario(h):
        await h.start()
        leading = [True]
        h.coordinator.may_lead = lambda: leading[0]
        h.shard._idle = False  # the shard's event task is busy: the request queues behind it
        pending = asyncio.ensure_future(h.commit(7))
        while h.shard._queue.empty():  # accepted and queued, not yet run
            await asyncio.sleep(0)
        leading[0] = False
        assert h.commit_code(await pending) == ErrorCode.not_coordinator
        leading[0] = True
        assert await h.fetch() == (ErrorCode.none, -1)

    coordinator_harness(scenario)


def test_a_submitters_meter_is_charged_with_its_events_time(coordinator_harness):
    """Request quotas charge a client for the coordinator events its requests submit."""
    from tidemark.coordinator.runtime.io import EVENT_METER, Meter

    async def scenario(h):
        await h.start()
        meter = Meter()
        token = EVENT_METER.set(meter)
        try:
            assert h.commit_code(await h.commit(7)) == ErrorCode.none
        finally:
            EVENT_METER.reset(token)
        assert meter.seconds > 0
        charged = meter.seconds
        assert h.commit_code(await h.commit(8)) == ErrorCode.none  # not metered: nothing charged
        assert meter.seconds == charged

    coordinator_harness(scenario)


def test_no_request_leaves_its_response_token_behind(coordinator_harness):
    """Every request's token goes once it is answered, whatever the answer: a commit refused
    while its shard loads, an answered commit, a timed-out one, one whose caller gave up. (A
    commit refused by a loading shard used to keep its token, and its future, for ever.)"""
    async def scenario(h):
        waiting = h.coordinator._waiting
        h.topic.create()
        h.coordinator.start()
        assert h.shard.state is LoadState.LOADING
        assert h.commit_code(await h.commit(1)) == ErrorCode.coordinator_load_in_progress
        assert waiting == {}
        await h.settle()
        assert h.commit_code(await h.commit(2)) == ErrorCode.none
        assert waiting == {}
        h.writer.auto_commit = False  # appends wait for the test from here on
        timing_out = asyncio.ensure_future(h.commit(3))
        await h.settle()
        assert len(waiting) == 1  # held until the high watermark passes it, or the timeout
        h.clock.advance(200)
        await h.settle()
        assert h.commit_code(timing_out.result()) == ErrorCode.request_timed_out
        assert waiting == {}
        given_up = asyncio.ensure_future(h.commit(4))
        await h.settle()
        given_up.cancel()
        await h.settle()
        assert given_up.cancelled()
        assert waiting == {}

    coordinator_harness(scenario, offsets_commit_timeout_ms="200")


def test_pending_commits_time_out_each_at_its_own_deadline(coordinator_harness):
    """Commits appended at different times, none committed: each is answered
    REQUEST_TIMED_OUT exactly offsets.commit.timeout.ms after its own append, not with the
    first one nor later; one committed meanwhile is answered NONE."""
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False
        first = asyncio.ensure_future(h.commit(1, partition=0))
        await h.settle()
        h.clock.advance(50)
        second = asyncio.ensure_future(h.commit(2, partition=1))
        await h.settle()
        h.clock.advance(50)
        third = asyncio.ensure_future(h.commit(3, partition=0, group="other"))
        await h.settle()
        h.clock.advance(99)  # 199 ms after the first
        await h.settle()
        assert not first.done() and not second.done() and not third.done()
        h.clock.advance(1)
        await h.settle()
        assert h.commit_code(first.result()) == ErrorCode.request_timed_out
        assert not second.done() and not third.done()
        h.clock.advance(49)
        await h.settle()
        assert not second.done()
        h.clock.advance(1)
        await h.settle()
        assert h.commit_code(second.result()) == ErrorCode.request_timed_out
        assert not third.done()
        h.writer.commit()  # the third is committed before its deadline
        await h.settle()
        assert h.commit_code(third.result()) == ErrorCode.none
        h.clock.advance(1_000)
        await h.settle()
        assert await h.fetch("other") == (ErrorCode.none, 3)

    coordinator_harness(scenario, offsets_commit_timeout_ms="200")
