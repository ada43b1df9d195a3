"""Incremental fetch sessions (KIP-227) between a follower and its leader: the leader's side over
the wire, from a raw client speaking as the follower, and the follower's own bookkeeping."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import until
from tests.broker.test_replication import NOW, _produce, _roles, two_brokers
from tests.integration.raw import AsyncRawClient
from tidemark.coordinator.runtime.io import SystemClock
from tidemark.replication.fetch_sessions import SESSION_SWEEP_MS, FollowerSession

FETCH = 1
FOLLOWER = 2


def _fetch_body(session_id: int, epoch: int, named: dict[tuple[str, int], int], forgotten=(), replica_id=FOLLOWER):
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), offset in named.items():
        by_topic.setdefault(topic, []).append({"partition": index, "current_leader_epoch": 1, "fetch_offset": offset,
                                               "log_start_offset": 0, "partition_max_bytes": 1 << 20})
    forgotten_by_topic: dict[str, list[int]] = {}
    for topic, index in forgotten:
        forgotten_by_topic.setdefault(topic, []).append(index)
    return {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": p} for t, p in by_topic.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": p} for t, p in forgotten_by_topic.items()],
            "rack_id": ""}


def _answered(response) -> dict[tuple[str, int], tuple[int, int, bool]]:
    """(error code, high watermark, has records) of each partition the answer names."""
    return {(t.topic, p.partition_index): (p.error_code, p.high_watermark, bool(p.records))
            for t in response.responses for p in t.partitions}


def _lead(leader, follower) -> None:
    """The leader leads t-0 and u-0..2 at epoch 1, replicated by the follower (no fetcher runs:
    the test's raw client is the follower)."""
    leader.replicas.create_topic("u", 3, {})
    for topic, index in (("t", 0), ("u", 0), ("u", 1), ("u", 2)):
        partition = leader.replicas.partition(topic, index)
        partition.become_leader(1, (1, FOLLOWER), frozenset({1, FOLLOWER}), zk_version=0, now_ms=NOW)


ALL = {("t", 0): 0, ("u", 0): 0, ("u", 1): 0, ("u", 2): 0}


@contextlib.asynccontextmanager
async def _opened(tmp_path, clock: SystemClock | None = None):
    """(leader, raw client speaking as the follower, the full fetch that opened its session)."""
    async with two_brokers(tmp_path) as (leader, follower):
        _lead(leader, follower)
        if clock is not None:
            leader.clock = clock  # the clock of the connections made from now on
        client = await AsyncRawClient.connect(leader.port)
        try:
            yield leader, client, await client.request(FETCH, 12, _fetch_body(0, 0, ALL))
        finally:
            await client.close()


class SteppedClock(SystemClock):
    """Stands still but when the test moves it forward: no fetch session sweeps unless told."""

    def __init__(self) -> None:
        self.at_ms = super().now_ms()

    def now_ms(self) -> int:
        return self.at_ms


def test_a_session_answers_only_what_changed_and_counts_every_partition_as_fetched(tmp_path):
    async def scenario():
        clock = SteppedClock()
        async with _opened(tmp_path, clock) as (leader, client, opened):
            assert opened.error_code == ErrorCode.none and opened.session_id != 0
            assert _answered(opened) == {key: (ErrorCode.none, 0, False) for key in ALL}
            session = opened.session_id
            assert len(leader.replicas.fetch_sessions) == 1

            # Nothing changed: an incremental fetch naming nothing gets no partitions, and does
            # not even read the idle ones ...
            u2 = leader.replicas.partition("u", 2)
            u2.followers[FOLLOWER].last_caught_up_ms = 0
            quiet = await client.request(FETCH, 12, _fetch_body(session, 1, {}))
            assert (quiet.error_code, quiet.session_id, _answered(quiet)) == (ErrorCode.none, session, {})
            assert u2.followers[FOLLOWER].last_caught_up_ms == 0
            # ... but once SESSION_SWEEP_MS passed, a fetch reads every partition of the session
            # and counts it as fetched: the idle follower stays caught up (it would otherwise
            # leave the ISR after replica.lag.time.max.ms).
            clock.at_ms += SESSION_SWEEP_MS
            swept = await client.request(FETCH, 12, _fetch_body(session, 2, {}))
            assert _answered(swept) == {}
            assert u2.followers[FOLLOWER].last_caught_up_ms > 0

            # A record on u-1: only u-1 is answered, with it.
            assert (await _produce(client, b"v", acks=1, topic="u", partition=1))[0] == ErrorCode.none
            appended = await client.request(FETCH, 12, _fetch_body(session, 3, {}))
            assert _answered(appended) == {("u", 1): (ErrorCode.none, 0, True)}
            # The follower names u-1 at its new end: the high watermark moves, so u-1 is news
            # once more (without records); the session's position for the others is unchanged.
            moved = await client.request(FETCH, 12, _fetch_body(session, 4, {("u", 1): 1}))
            assert _answered(moved) == {("u", 1): (ErrorCode.none, 1, False)}
            assert leader.replicas.partition("u", 1).high_watermark == 1

            # Forgotten partitions are no longer read nor answered.
            assert (await _produce(client, b"v", acks=1, topic="u", partition=0))[0] == ErrorCode.none
            forgot = await client.request(FETCH, 12, _fetch_body(session, 5, {}, forgotten=[("u", 0)]))
            assert _answered(forgot) == {}
            # A leadership lost is found by the next sweep, and a partition that errors is
            # answered with its error every time it is read.
            leader.replicas.partition("t", 0).become_follower(3, 2, (3, 1), frozenset({3, 1}), zk_version=1)
            clock.at_ms += SESSION_SWEEP_MS
            moved_away = await client.request(FETCH, 12, _fetch_body(session, 6, {}))
            assert _answered(moved_away) == {("t", 0): (ErrorCode.not_leader_or_follower, -1, False)}
            named = await client.request(FETCH, 12, _fetch_body(session, 7, {("t", 0): 0}))
            assert _answered(named) == {("t", 0): (ErrorCode.not_leader_or_follower, -1, False)}

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_an_append_wakes_a_sessions_parked_fetch_and_is_answered_alone(tmp_path):
    async def scenario():
        async with _opened(tmp_path) as (leader, client, opened):
            session = opened.session_id
            producer = await AsyncRawClient.connect(leader.port)
            # Parked: nothing to read, and it would wait an hour for min_bytes.
            parked_body = {**_fetch_body(session, 1, {}), "max_wait": 3_600_000, "min_bytes": 1}
            parked = asyncio.ensure_future(client.request(FETCH, 12, parked_body))
            await until(lambda: leader.replicas.fetch_sessions.session_of(FOLLOWER).watched)
            assert (await _produce(producer, b"v", acks=1, topic="u", partition=2))[0] == ErrorCode.none
            woken = await parked
            assert _answered(woken) == {("u", 2): (ErrorCode.none, 0, True)}
            await producer.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_partition_the_byte_limit_left_behind_is_read_at_the_next_fetch(tmp_path):
    async def scenario():
        # A clock standing still: no sweep, only the session's own bookkeeping reads u-1 again.
        async with _opened(tmp_path, SteppedClock()) as (leader, client, opened):
            session = opened.session_id
            for index in (0, 1):
                assert (await _produce(client, b"v", acks=1, topic="u", partition=index))[0] == ErrorCode.none
            # A 1-byte response limit: the first partition with records gets one batch (KIP-74),
            # the other nothing.
            first = await client.request(FETCH, 12, {**_fetch_body(session, 1, {}), "max_bytes": 1})
            got = {key for key, (_, _, records) in _answered(first).items() if records}
            assert len(got) == 1
            (left,) = {("u", 0), ("u", 1)} - got
            # The follower names only the partition it appended to; the other is read anyway.
            second = await client.request(FETCH, 12, _fetch_body(session, 2, {next(iter(got)): 1}))
            assert _answered(second)[left] == (ErrorCode.none, 0, True)

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_session_errors_and_who_gets_a_session(tmp_path):
    async def scenario():
        async with _opened(tmp_path) as (leader, client, opened):
            session = opened.session_id
            # The epoch must be the one the session expects next (1), and the id one it knows.
            stale = await client.request(FETCH, 12, _fetch_body(session, 7, {}))
            assert (stale.error_code, stale.session_id, stale.responses) == (
                ErrorCode.invalid_fetch_session_epoch, 0, ())
            unknown = await client.request(FETCH, 12, _fetch_body(session + 1, 1, {}))
            assert unknown.error_code == ErrorCode.fetch_session_id_not_found
            # Another fetcher (a consumer, another replica id) cannot continue it.
            for replica_id in (-1, 3):
                taken = await client.request(FETCH, 12, _fetch_body(session, 1, {}, replica_id=replica_id))
                assert taken.error_code == ErrorCode.fetch_session_id_not_found
            assert (await client.request(FETCH, 12, _fetch_body(session, 1, {}))).error_code == ErrorCode.none

            # A follower's new session replaces its old one: one per follower.
            renewed = (await client.request(FETCH, 12, _fetch_body(0, 0, ALL))).session_id
            assert renewed != session and len(leader.replicas.fetch_sessions) == 1
            gone = await client.request(FETCH, 12, _fetch_body(session, 2, {}))
            assert gone.error_code == ErrorCode.fetch_session_id_not_found
            # Epoch -1 closes it, and the fetch is a full one without a session.
            closed = await client.request(FETCH, 12, _fetch_body(renewed, -1, ALL))
            assert (closed.error_code, closed.session_id, len(_answered(closed))) == (ErrorCode.none, 0, 4)
            assert len(leader.replicas.fetch_sessions) == 0

            # Consumers, and ids that follow nothing here, are declined: session id 0.
            for replica_id in (-1, 7):
                declined = await client.request(FETCH, 12, _fetch_body(0, 0, ALL, replica_id=replica_id))
                assert declined.session_id == 0
            # So is a follower naming topics by id (v13+): sessions go by topic name.
            by_id = _fetch_body(0, 0, {("u", 0): 0})
            by_id["topics"] = [{**t, "topic_id": leader.replicas.topic("u").topic_id} for t in by_id["topics"]]
            declined = await client.request(FETCH, 13, by_id)
            assert (declined.error_code, declined.session_id) == (ErrorCode.none, 0)
            assert [p.error_code for t in declined.responses for p in t.partitions] == [ErrorCode.none]
            assert len(leader.replicas.fetch_sessions) == 0

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_the_follower_replicates_through_a_session_and_a_new_connection_opens_a_new_one(tmp_path):
    async def scenario():
        async with two_brokers(tmp_path) as (leader, follower):
            lp, fp, fetcher = _roles(leader, follower, epoch=1)
            client = await AsyncRawClient.connect(leader.port)
            for i in range(5):
                assert await _produce(client, f"v{i}".encode()) == (ErrorCode.none, i)
            await until(lambda: fp.high_watermark == 5)
            (first,) = leader.replicas.fetch_sessions._by_id
            await fetcher.stop()  # its connection closes; a new fetcher connects again
            fetcher.start()
            assert await _produce(client, b"after") == (ErrorCode.none, 5)
            await until(lambda: fp.high_watermark == 6)
            (second,) = leader.replicas.fetch_sessions._by_id
            assert second != first
            await client.close()
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_the_followers_half_names_only_changes_and_starts_over_after_an_error():
    session = FollowerSession()
    a, b = ("t", 0), ("t", 1)
    full = session.request({a: (0, 0, 1), b: (0, 0, 1)})
    assert full == (0, 0, {a: (0, 0, 1), b: (0, 0, 1)}, [])
    session.answered(full, 0, 42)
    assert (session.id, session.epoch) == (42, 1)

    moved = session.request({a: (5, 0, 1), b: (0, 0, 1)})
    assert moved == (42, 1, {a: (5, 0, 1)}, [])
    session.answered(moved, 0, 42)
    dropped = session.request({a: (5, 0, 1)})
    assert dropped == (42, 2, {}, [b])
    session.answered(dropped, 0, 42)
    assert session.request({a: (5, 0, 1)}) == (42, 3, {}, [])

    session.answered(session.request({a: (5, 0, 1)}), ErrorCode.invalid_fetch_session_epoch, 0)
    assert session.request({a: (5, 0, 1)}) == (0, 0, {a: (5, 0, 1)}, [])
    declined = session.request({a: (5, 0, 1)})
    session.answered(declined, 0, 0)  # the leader declined: full fetches on
    assert session.request({a: (6, 0, 1)}) == (0, 0, {a: (6, 0, 1)}, [])
