"""On RF=3 both followers fetch every replicated write from the same position. Whatever a leader
does to answer them cheaply (sharing one read between the two was tried, see docs/design.md),
a fetch is never answered with bytes read before the log changed: an append between the two
followers' fetches, or a truncation and a new leadership that put other records at the same
offsets."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tests.broker.leading import LEADER, NOW, leading
from tests.broker.leading import follower_fetch as follower_answer
from tests.broker.leading import produce
from tidemark.records import decode_records, iter_batches

FOLLOWERS = (2, 3)
REPLICAS = (LEADER, *FOLLOWERS)


async def follower_fetch(client, replica_id: int, fetch_offset: int, epoch: int = 1) -> bytes:
    answer = await follower_answer(client, replica_id, fetch_offset, epoch)
    assert answer.error_code == ErrorCode.none
    return bytes(answer.records or b"")


def values(records: bytes) -> list[tuple[int, bytes]]:
    return [(r.offset, r.value) for position, _ in iter_batches(records) for r in decode_records(records, position)]


def test_a_write_between_the_followers_fetches_is_read_again(tmp_path):
    async def scenario():
        async with leading(tmp_path, REPLICAS, frozenset(REPLICAS)) as (partition, client):
            await produce(client, b"a")
            assert values(await follower_fetch(client, FOLLOWERS[0], 0)) == [(0, b"a")]
            await produce(client, b"b")
            assert values(await follower_fetch(client, FOLLOWERS[1], 0)) == [(0, b"a"), (1, b"b")]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_records_rewritten_at_the_same_offsets_under_a_new_leadership_are_read_again(tmp_path):
    async def scenario():
        async with leading(tmp_path, REPLICAS, frozenset(REPLICAS)) as (partition, client):
            await produce(client, b"a")
            await produce(client, b"old")
            assert values(await follower_fetch(client, FOLLOWERS[0], 1)) == [(1, b"old")]
            # Followed another leader, lost offset 1 to it, and leads again with other records there.
            assert partition.become_follower(FOLLOWERS[0], 2, (LEADER, *FOLLOWERS), frozenset({FOLLOWERS[0]}), zk_version=1)
            partition.log.truncate_to(1)
            assert partition.become_leader(3, (LEADER, *FOLLOWERS), frozenset({LEADER, *FOLLOWERS}), zk_version=2,
                                           now_ms=NOW)
            await produce(client, b"new")
            assert partition.log.log_end_offset == 2  # the same end as before the truncation
            assert values(await follower_fetch(client, FOLLOWERS[1], 1, epoch=3)) == [(1, b"new")]

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
