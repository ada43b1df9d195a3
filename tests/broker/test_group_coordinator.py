"""The coordinator runtime in a real broker: its partitions are the broker's own logs."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from tidemark.broker.config import BrokerConfig
from tidemark.broker.group_coordinator import OFFSETS_TOPIC, LoadState
from tidemark.broker.server import Broker
from tests.coordinator.conftest import commit_code, offset_commit


def _fetched(broker: Broker) -> tuple[ErrorCode, int]:
    return broker.coordinator.read(
        "g", lambda shard: (ErrorCode.none, shard.fetch_offsets("g", [("orders", [0])], False)[0]["partitions"][0]
                            ["committed_offset"]), lambda code: (code, -1))


async def _until_active(broker: Broker) -> None:
    while not broker.coordinator.shards or any(
            runtime.state is not LoadState.ACTIVE for runtime in broker.coordinator.shards.values()):
        await asyncio.sleep(0.01)


def test_deleting_the_offsets_topic_resigns_every_shard(tmp_path):
    async def scenario() -> None:
        broker = Broker(BrokerConfig({"offsets.topic.num.partitions": "2"}), tmp_path, port=0)
        await broker.start()
        try:
            broker.replicas.create_topic("orders", 1, {})
            broker.coordinator.ensure_offsets_topic()
            await _until_active(broker)
            assert commit_code(await offset_commit(broker.coordinator, 41)) == ErrorCode.none
            assert _fetched(broker) == (ErrorCode.none, 41)
            broker.replicas.delete_topic(OFFSETS_TOPIC)
            assert {runtime.state for runtime in broker.coordinator.shards.values()} == {LoadState.UNLOADED}
            assert _fetched(broker) == (ErrorCode.not_coordinator, -1)
            assert commit_code(await offset_commit(broker.coordinator, 42)) == ErrorCode.not_coordinator
            broker.coordinator.ensure_offsets_topic()  # FindCoordinator creates it again
            await _until_active(broker)
            assert _fetched(broker) == (ErrorCode.none, -1)  # a fresh, empty partition
        finally:
            await broker.stop()

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
