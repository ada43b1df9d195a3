"""A leader learns where a follower's log ends from its fetches, but only from a fetch whose read
succeeded (Kafka's ReplicaManager skips the update when the read fails): a fetch from past the
leader's log end, or of an offline log, must neither move the high watermark nor bring the
follower back into the ISR."""

from __future__ import annotations

import asyncio
import contextlib

from kio.schema.errors import ErrorCode

from tests.broker.leading import LEADER, follower_fetch, leading, produce

FOLLOWER = 2


@contextlib.asynccontextmanager
async def _leading(tmp_path, isr: frozenset[int]):
    """t-0 on replicas LEADER and FOLLOWER, with three records."""
    async with leading(tmp_path, (LEADER, FOLLOWER), isr) as (partition, client):
        for i in range(3):
            await produce(client, b"v%d" % i)
        yield partition, client


async def _follower_fetch(client, fetch_offset: int) -> ErrorCode:
    return ErrorCode((await follower_fetch(client, FOLLOWER, fetch_offset)).error_code)


def test_a_fetch_past_the_leaders_end_does_not_count_as_the_followers_position(tmp_path):
    async def scenario():
        async with _leading(tmp_path, isr=frozenset({LEADER, FOLLOWER})) as (partition, client):
            assert partition.high_watermark == 0  # the follower in the ISR has fetched nothing
            assert await _follower_fetch(client, 10) == ErrorCode.offset_out_of_range
            assert partition.followers[FOLLOWER].log_end_offset == -1
            assert partition.high_watermark == 0  # records the follower never had are not committed
            assert await _follower_fetch(client, 2) == ErrorCode.none  # a read that succeeds counts
            assert partition.followers[FOLLOWER].log_end_offset == 2
            assert partition.high_watermark == 2

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_failed_fetch_does_not_bring_a_follower_back_into_the_isr(tmp_path):
    async def scenario():
        async with _leading(tmp_path, isr=frozenset({LEADER})) as (partition, client):
            assert await _follower_fetch(client, 10) == ErrorCode.offset_out_of_range
            assert partition.isr_to_expand() is None
            assert await _follower_fetch(client, 3) == ErrorCode.none
            assert partition.isr_to_expand() == frozenset({LEADER, FOLLOWER})

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_a_fetch_of_an_offline_log_is_a_storage_error_and_not_a_position(tmp_path):
    async def scenario():
        async with _leading(tmp_path, isr=frozenset({LEADER, FOLLOWER})) as (partition, client):
            partition.log.local.offline = OSError(5, "Input/output error")  # the disk failed under it
            assert await _follower_fetch(client, 3) == ErrorCode.kafka_storage_error
            assert partition.followers[FOLLOWER].log_end_offset == -1
            assert partition.high_watermark == 0

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
