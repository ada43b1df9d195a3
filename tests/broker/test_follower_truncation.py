"""A follower's truncation against its leader, as Kafka's fetcher does it (KIP-101, KIP-279):
between two real brokers in this process, with histories written by hand, the follower ends with
exactly the leader's batches, epochs included, however the two histories diverged."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.broker.inprocess import until
from tests.integration.raw import AsyncRawClient
from tidemark.broker.config import BrokerConfig
from tidemark.broker.server import Broker
from tidemark.records import build_batch, decode_records, iter_batches
from tidemark.replication.replica_fetcher import OFFSET_FOR_LEADER_EPOCH, ReplicaFetcher

NOW = 1_700_000_000_000
LEADER, FOLLOWER = 2, 1


@contextlib.asynccontextmanager
async def leader_and_follower(tmp_path):
    """Brokers 1 (follower) and 2 (leader), each with topic t of one partition, no roles yet."""
    brokers = {i: Broker(BrokerConfig({"node.id": str(i)}), tmp_path / f"b{i}", port=0) for i in (FOLLOWER, LEADER)}
    for broker in brokers.values():
        await broker.start()
        broker.replicas.create_topic("t", 1, {})
    try:
        yield brokers[LEADER], brokers[FOLLOWER]
    finally:
        for broker in brokers.values():
            await broker.stop()


def _write(partition, epochs: list[tuple[int, int]], tag: str) -> None:
    """Append one record per offset, each (epoch, count) in turn, values naming `tag` and the offset."""
    for epoch, count in epochs:
        for _ in range(count):
            offset = partition.log.log_end_offset
            partition.log.append(build_batch([(None, f"{tag}{offset}".encode(), (), NOW)]), leader_epoch=epoch,
                                 now_ms=NOW)


def _records(partition) -> list[tuple[int, int, bytes]]:
    """(offset, leader epoch, value) of every record in the log."""
    out, position, end = [], partition.log.log_start_offset, partition.log.log_end_offset
    while position < end:
        chunk = bytes(partition.log.read(position, 1 << 30, upper_bound=end))
        for at, header in iter_batches(chunk, validate=False):
            out += [(r.offset, header.partition_leader_epoch, r.value) for r in decode_records(chunk, at)]
            position = header.last_offset + 1
    return out


def _roles(leader: Broker, follower: Broker, epoch: int):
    lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
    replicas, isr = (LEADER, FOLLOWER), frozenset({LEADER})
    lp.become_leader(epoch, replicas, isr, zk_version=0, now_ms=NOW)
    fp.become_follower(LEADER, epoch, replicas, isr, zk_version=0)
    return lp, fp


class RecordingFetcher(ReplicaFetcher):
    """A ReplicaFetcher whose requests to the leader are seen (and may be acted on) by the test."""

    def __init__(self, *args, on_answer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[dict] = []  # every OffsetForLeaderEpoch partition asked, in order
        self.on_answer = on_answer  # called after each OffsetForLeaderEpoch answer, before it is used

    async def _connect(self):
        connection = await super()._connect()
        request = connection.request

        async def recorded(api_key, version, body, timeout_s):
            if api_key == OFFSET_FOR_LEADER_EPOCH:
                self.asked.extend(p for topic in body["topics"] for p in topic["partitions"])
            response = await request(api_key, version, body, timeout_s)
            if api_key == OFFSET_FOR_LEADER_EPOCH and self.on_answer is not None:
                self.on_answer()
            return response

        connection.request = recorded
        return connection


def _diverged_at_epoch_3(leader: Broker, follower: Broker):
    """The issue's histories: both hold offsets 0-1 of epoch 0; the leader then 2-4 of epoch 1,
    the follower 2-5 of epoch 2; the leader leads again at epoch 3 (from offset 5)."""
    lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
    _write(lp, [(0, 2)], "both")
    _write(fp, [(0, 2)], "both")
    _write(lp, [(1, 3)], "leader")
    _write(fp, [(2, 4)], "follower")
    return _roles(leader, follower, epoch=3)


def _fetcher(leader: Broker, follower: Broker, **kwargs) -> RecordingFetcher:
    return RecordingFetcher(FOLLOWER, LEADER, lambda: ("127.0.0.1", leader.port),
                            append=follower.replicas.append_as_follower,
                            sync_truncations=follower.replicas.sync_truncations, max_wait_ms=100, **kwargs)


def test_a_follower_truncates_to_its_own_end_of_an_epoch_the_leader_never_had(tmp_path):
    """The issue's case. Both wrote offsets 0-1 in epoch 0. Then the leader wrote 2-4 in epoch 1
    (never fetched by the follower), the follower 2-5 in epoch 2 (never fetched by the leader),
    and the leader leads again at epoch 3 from offset 5. Asked for epoch 2 the leader answers
    (1, 5): epoch 1 is unknown to the follower, which must cut back to where its epoch 0 ends
    (2, not the leader's 5), ask again, and fetch 2-4 from the leader."""
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            lp, fp = _diverged_at_epoch_3(leader, follower)
            _write(lp, [(3, 1)], "leader")
            fetcher = _fetcher(leader, follower)
            fetcher.add(fp)
            fetcher.start()
            await until(lambda: lp.followers[FOLLOWER].log_end_offset == 6)  # fetched up to the leader's end
            assert _records(fp) == _records(lp)
            assert [p["leader_epoch"] for p in fetcher.asked] == [2, 0]  # asked again with epoch 0
            assert [value for _, _, value in _records(fp)] == [b"both0", b"both1", b"leader2", b"leader3",
                                                               b"leader4", b"leader5"]
            assert fp.log.leader_epoch_cache.entries == lp.log.leader_epoch_cache.entries
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_fast_leader_changes_ask_again_until_both_name_a_shared_epoch(tmp_path):
    """KIP-279's fast leader changes: leader epochs 0@0 2@2 4@4 6@6, follower epochs 0@0 1@1
    3@3 5@5; no epoch past 0 is on both. The follower asks with 5, 3, then 1, truncating to 5, 3,
    then 1 (the end of its epoch 0), and ends with the leader's log."""
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
            _write(lp, [(0, 1)], "both")
            _write(fp, [(0, 1)], "both")
            _write(lp, [(0, 1), (2, 2), (4, 2)], "leader")
            _write(fp, [(1, 2), (3, 2), (5, 2)], "follower")
            lp, fp = _roles(leader, follower, epoch=6)
            _write(lp, [(6, 2)], "leader")
            fetcher = _fetcher(leader, follower)
            fetcher.add(fp)
            fetcher.start()
            await until(lambda: lp.followers[FOLLOWER].log_end_offset == 8)  # fetched up to the leader's end
            assert _records(fp) == _records(lp)
            assert [p["leader_epoch"] for p in fetcher.asked] == [5, 3, 1]
            assert [epoch for _, epoch, _ in _records(fp)] == [0, 0, 2, 2, 4, 4, 6, 6]
            assert fp.log.leader_epoch_cache.entries == lp.log.leader_epoch_cache.entries
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_no_truncation_by_an_answer_to_a_leadership_that_moved_meanwhile(tmp_path):
    """While the leader answers OffsetForLeaderEpoch the follower moves to epoch 4 (a new
    leadership, the same leader). The answer was for epoch 3: the follower must not act on it,
    and asks again at epoch 4 (which this leader, still at 3, refuses: nothing is truncated)."""
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            lp, fp = _diverged_at_epoch_3(leader, follower)
            fetcher = None

            def leadership_moves():
                if fp.leader_epoch == 3:
                    fp.become_follower(LEADER, 4, (LEADER, FOLLOWER), frozenset({LEADER}), zk_version=1)
                    fetcher.add(fp)

            fetcher = _fetcher(leader, follower, on_answer=leadership_moves)
            fetcher.add(fp)
            fetcher.start()
            # The first answer was handled before the second ask (or it truncated: wrong).
            await until(lambda: len(fetcher.asked) >= 2 or fp.log.log_end_offset < 6)
            assert [p["current_leader_epoch"] for p in fetcher.asked[:2]] == [3, 4]
            assert fp.log.log_end_offset == 6  # untouched by the stale answer
            assert [epoch for _, epoch, _ in _records(fp)] == [0, 0, 2, 2, 2, 2]
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_only_the_leader_answers_offset_for_leader_epoch(tmp_path):
    """A follower's log may lag or diverge: asked where an epoch ends, it refuses, as in Kafka
    (only a debugging replica id may read a follower's answer)."""
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            _write(leader.replicas.partition("t", 0), [(0, 2)], "both")
            _write(follower.replicas.partition("t", 0), [(0, 2)], "both")
            _roles(leader, follower, epoch=1)
            for broker, replica_id, expected in [(leader, FOLLOWER, (ErrorCode.none, 0, 2)),
                                                 (follower, LEADER, (ErrorCode.not_leader_or_follower, -1, -1)),
                                                 (follower, -1, (ErrorCode.not_leader_or_follower, -1, -1)),
                                                 (follower, -2, (ErrorCode.none, 0, 2))]:
                client = await AsyncRawClient.connect(broker.port)
                response = await client.request(OFFSET_FOR_LEADER_EPOCH, 3, {"replica_id": replica_id, "topics": [
                    {"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 1, "leader_epoch": 0}]}]})
                answer = response.topics[0].partitions[0]
                assert (answer.error_code, answer.leader_epoch, answer.end_offset) == expected
                await client.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_follower_whose_log_ends_below_the_leaders_log_start_starts_afresh_there(tmp_path):
    """While the follower was away the leader deleted records below 5 (DeleteRecords). The
    follower's fetch from 2 is out of range: it asks the leader's log start (ListOffsets
    earliest, Kafka's fetchOffsetAndTruncate), starts its log there and fetches on, instead of
    fetching from 2 again and again."""
    async def scenario():
        async with leader_and_follower(tmp_path) as (leader, follower):
            lp, fp = leader.replicas.partition("t", 0), follower.replicas.partition("t", 0)
            _write(lp, [(0, 2)], "both")
            _write(fp, [(0, 2)], "both")
            _write(lp, [(0, 5)], "leader")
            lp, fp = _roles(leader, follower, epoch=1)
            lp.log.flush()
            lp.flushed_to(lp.log.log_end_offset)  # the leader alone in its ISR: committed once durable
            assert await leader.replicas.delete_records(lp, 5) == 5
            fetcher = _fetcher(leader, follower)
            fetcher.add(fp)
            fetcher.start()
            await until(lambda: lp.followers[FOLLOWER].log_end_offset == 7)
            assert fp.log.log_start_offset == 5
            assert _records(fp) == _records(lp) == [(5, 0, b"leader5"), (6, 0, b"leader6")]
            await fetcher.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
