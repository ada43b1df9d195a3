"""KIP-848 heartbeats on the real coordinator runtime with the high watermark held: a heartbeat
decides on the latest view (every record appended), its answer waits for its records to commit,
reads (ConsumerGroupDescribe) see only the committed view, and a failed append leaves the
latest view as the committed one plus what survived."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group import views
from tidemark.records.consumer_group_schema import TopicMetadata
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

TOPICS = {"orders": TopicMetadata(uuid.UUID(int=7), "orders", 2)}


def heartbeat(h, member: str, epoch: int) -> asyncio.Future[Any]:
    request = build(load_request_schema(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1), {
        "group_id": "g", "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout": 30000 if epoch == 0 else -1,
        "subscribed_topic_names": ["orders"] if epoch == 0 else None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": [] if epoch == 0 else None})
    return asyncio.ensure_future(h.coordinator.call(
        "g", lambda shard, token, now: shard.consumer.heartbeat(request, 1, token, now, TOPICS, "c", "/h"),
        lambda code: {"error_code": code}))


def describe(h) -> dict[str, Any]:
    shard = h.shard.shard
    return views.describe(shard, "g", TOPICS)


def test_heartbeats_behind_writes_in_flight_decide_on_the_latest_view(coordinator_harness):
    async def scenario(h):
        await h.start()
        h.writer.auto_commit = False
        first = heartbeat(h, "a", 0)
        second = heartbeat(h, "b", 0)  # decided with a's records appended, not committed
        await h.settle()
        assert not first.done() and not second.done()
        assert describe(h)["error_code"] == ErrorCode.group_id_not_found  # reads: the committed view
        h.writer.commit()
        a, b = await first, await second
        assert (a["member_epoch"], b["member_epoch"]) == (1, 2)
        described = describe(h)
        assert (described["group_epoch"], sorted(m["member_id"] for m in described["members"])) == (2, ["a", "b"])

    coordinator_harness(scenario)


def test_a_failed_append_leaves_the_latest_view_as_committed(coordinator_harness):
    async def scenario(h):
        await h.start()
        assert (await heartbeat(h, "a", 0))["member_epoch"] == 1
        h.writer.fail_appends = 1
        failed = await heartbeat(h, "b", 0)
        assert failed["error_code"] != ErrorCode.none
        assert set(h.shard.shard.consumer_groups.latest["g"].members) == {"a"}
        assert (await heartbeat(h, "b", 0))["member_epoch"] == 2

    coordinator_harness(scenario)
