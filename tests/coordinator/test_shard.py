"""The coordinator shard on an in-memory log with a manual clock: commits, fetches, replay."""

from __future__ import annotations

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, GroupState
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.records.offsets_schema import decode_key, decode_offset_commit_value
from tidemark.wire.build import build

from .memory_log import NOW, InMemoryLog
from .test_group import member, subscription
from tidemark.wire.api_keys import ApiKey

TOPICS = {("orders", 0), ("orders", 1), ("orders", 2)}


def new_shard() -> GroupCoordinatorShard:
    return GroupCoordinatorShard(0, CoordinatorConfig(), lambda topic, partition: (topic, partition) in TOPICS)


def commit_request(group, offsets, version=8, generation=-1, member="", metadata=None, retention=-1):
    cls = load_request_schema(ApiKey.OFFSET_COMMIT, version)
    return build(cls, {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
                       "group_instance_id": None, "retention_time": retention,
                       "topics": [{"name": topic, "partitions": [
                           {"partition_index": p, "committed_offset": o, "committed_leader_epoch": 3,
                            "committed_metadata": metadata} for p, o in parts]} for topic, parts in offsets.items()]})


def codes(result, token=1):
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in result.responses[token]["topics"] for p in t["partitions"]}


def test_commit_is_invisible_until_replayed_then_fetched():
    shard, log = new_shard(), InMemoryLog()
    result = shard.commit_offsets(commit_request("g", {"orders": [(0, 10), (1, 20)]}), 8, 1, NOW)
    assert codes(result) == {("orders", 0): ErrorCode.none, ("orders", 1): ErrorCode.none}
    assert len(result.records) == 2
    # Appended but not committed: reads see nothing yet; require_stable sees the pending commit.
    assert shard.fetch_offsets("g", [("orders", [0])], False)[0]["partitions"][0]["committed_offset"] == -1
    first = log.append_pending(shard, result)
    assert shard.fetch_offsets("g", [("orders", [0])], False)[0]["partitions"][0]["committed_offset"] == -1
    stable = shard.fetch_offsets("g", [("orders", [0])], True)[0]["partitions"][0]
    assert stable["error_code"] == ErrorCode.unstable_offset_commit
    log.commit_from(shard, first, result)
    (topic,) = shard.fetch_offsets("g", [("orders", [0, 1, 2])], True)
    assert [(p["committed_offset"], p["committed_leader_epoch"], p["error_code"]) for p in topic["partitions"]] == [
        (10, 3, ErrorCode.none), (20, 3, ErrorCode.none), (-1, -1, ErrorCode.none)]
    assert shard.groups["g"].state is GroupState.EMPTY  # a simple group


def test_record_bytes_are_kafkas_v3_values():
    shard = new_shard()
    result = shard.commit_offsets(commit_request("g", {"orders": [(2, 77)]}, metadata="m"), 8, 1, NOW)
    (record,) = result.records
    key = decode_key(record.key)
    value = decode_offset_commit_value(record.value)
    assert (key.group, key.topic, key.partition) == ("g", "orders", 2)
    assert (value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, value.expire_timestamp) == (
        77, 3, "m", NOW, -1)
    assert record.value[:2] == b"\x00\x03"


def test_explicit_retention_writes_a_v1_value_with_expire_timestamp():
    shard = new_shard()
    result = shard.commit_offsets(commit_request("g", {"orders": [(0, 1)]}, version=2, retention=60_000), 2, 1, NOW)
    (record,) = result.records
    assert record.value[:2] == b"\x00\x01"
    assert decode_offset_commit_value(record.value).expire_timestamp == NOW + 60_000


def test_failed_append_leaves_no_trace():
    shard = new_shard()
    result = shard.commit_offsets(commit_request("g", {"orders": [(0, 10)]}), 8, 1, NOW)
    failed = result.on_failure(ErrorCode.request_timed_out, NOW)
    assert codes(failed) == {("orders", 0): ErrorCode.request_timed_out}
    assert not shard.offsets.has_pending("g")
    assert shard.fetch_offsets("g", [("orders", [0])], True)[0]["partitions"][0]["committed_offset"] == -1


def test_per_partition_errors_and_group_errors():
    shard, log = new_shard(), InMemoryLog()
    result = shard.commit_offsets(commit_request("g", {"orders": [(0, 1), (9, 1)], "nope": [(0, 1)]}), 8, 1, NOW)
    assert codes(result) == {("orders", 0): ErrorCode.none, ("orders", 9): ErrorCode.unknown_topic_or_partition,
                             ("nope", 0): ErrorCode.unknown_topic_or_partition}
    log.append_and_replay(shard, result)
    too_long = shard.commit_offsets(commit_request("g", {"orders": [(1, 5)]}, metadata="x" * 4097), 8, 2, NOW)
    assert codes(too_long, 2) == {("orders", 1): ErrorCode.offset_metadata_too_large} and not too_long.records
    assert codes(shard.commit_offsets(commit_request("", {"orders": [(0, 1)]}), 8, 3, NOW), 3) == {
        ("orders", 0): ErrorCode.invalid_group_id}
    unknown_v9 = shard.commit_offsets(commit_request("x", {"orders": [(0, 1)]}, version=9, generation=2), 9, 4, NOW)
    assert codes(unknown_v9, 4) == {("orders", 0): ErrorCode.group_id_not_found}
    unknown_v8 = shard.commit_offsets(commit_request("x", {"orders": [(0, 1)]}, generation=2), 8, 5, NOW)
    assert codes(unknown_v8, 5) == {("orders", 0): ErrorCode.illegal_generation}
    member = shard.commit_offsets(commit_request("g", {"orders": [(0, 1)]}, generation=1, member="m"), 8, 6, NOW)
    assert codes(member, 6) == {("orders", 0): ErrorCode.unknown_member_id}
    shard.groups["g"].transition_to(GroupState.DEAD, NOW)
    dead = shard.commit_offsets(commit_request("g", {"orders": [(0, 1)]}), 8, 7, NOW)
    assert codes(dead, 7) == {("orders", 0): ErrorCode.coordinator_not_available}


def test_replay_is_idempotent_and_loading_rebuilds_the_same_state():
    shard, log = new_shard(), InMemoryLog()
    for token, offset in enumerate((5, 6, 7), start=1):
        log.append_and_replay(shard, shard.commit_offsets(commit_request("g", {"orders": [(0, offset)]}), 8, token, NOW))
    log.append_and_replay(shard, shard.delete_offsets(
        build(load_request_schema(ApiKey.OFFSET_DELETE, 0), {"group_id": "g", "topics": [{"name": "orders", "partitions": [
            {"partition_index": 1}]}]}), 9, NOW))
    # Replaying an earlier record again (a reload racing a write) does not move the offset back.
    key, value = log.records[0]
    shard.replay(0, key, value, now_ms=NOW)
    assert shard.offsets.get("g", ("orders", 0)).offset == 7

    fresh = new_shard()
    log.replay_into(fresh)
    log.replay_into(fresh)  # twice: still the same
    assert fresh.offsets.group_offsets("g") == shard.offsets.group_offsets("g")
    assert fresh.groups["g"].state is GroupState.EMPTY


def test_delete_group_writes_tombstones_and_refuses_non_empty_groups():
    shard, log = new_shard(), InMemoryLog()
    log.append_and_replay(shard, shard.commit_offsets(commit_request("g", {"orders": [(0, 1), (1, 2)]}), 8, 1, NOW))
    result = shard.delete_group("g", 2, NOW)
    assert result.responses[2]["error_code"] == ErrorCode.none
    assert [value for _, value in ((r.key, r.value) for r in result.records)] == [None, None, None]
    log.append_and_replay(shard, result)
    assert shard.offsets.group_offsets("g") == {}
    assert shard.delete_group("g", 3, NOW).responses[3]["error_code"] == ErrorCode.group_id_not_found
    fresh = new_shard()
    log.replay_into(fresh)
    assert fresh.offsets.group_offsets("g") == {} and "g" not in fresh.groups


def test_offset_delete_counts_unknown_subscriptions_of_a_live_consumer_group_as_subscribed():
    """Kafka's ClassicGroup.isSubscribedToTopic: when the subscriptions are unknown (a member's
    metadata does not parse), a group using the consumer protocol is taken as subscribed to every
    topic, so its offsets are not deleted under it; an Empty group subscribes to nothing."""
    shard, log = new_shard(), InMemoryLog()
    log.append_and_replay(shard, shard.commit_offsets(commit_request("g", {"orders": [(0, 5)]}), 8, 1, NOW))
    group = shard.groups["g"] = Group("g", NOW)
    group.protocol_type = "consumer"
    group.add(member("m1", (("range", subscription("payments")),)))
    group.add(member("m2", (("range", b"\xff"),)))  # a subscription that cannot be decoded
    group.transition_to(GroupState.PREPARING_REBALANCE, NOW)
    group.transition_to(GroupState.COMPLETING_REBALANCE, NOW)
    group.protocol = "range"
    group.transition_to(GroupState.STABLE, NOW)
    request = build(load_request_schema(ApiKey.OFFSET_DELETE, 0), {"group_id": "g", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}]}]})
    refused = shard.delete_offsets(request, 2, NOW)
    assert codes(refused, 2) == {("orders", 0): ErrorCode.group_subscribed_to_topic} and not refused.records
    group.protocol_type = "connect"  # a live group of another protocol: refused as a whole
    assert shard.delete_offsets(request, 3, NOW).responses[3]["error_code"] == ErrorCode.non_empty_group
    group.protocol_type = "consumer"
    group.remove("m1")
    group.remove("m2")
    group.transition_to(GroupState.PREPARING_REBALANCE, NOW)
    group.transition_to(GroupState.EMPTY, NOW)
    deleted = log.append_and_replay(shard, shard.delete_offsets(request, 4, NOW))
    assert codes(deleted, 4) == {("orders", 0): ErrorCode.none}
    assert shard.offsets.group_offsets("g") == {}


def test_a_topics_partitions_looked_up_once_answer_as_partition_exists_does():
    """The broker hands the shard each topic's partitions (range(count)) instead of a question
    per partition: every commit is answered and written exactly as with partition_exists."""
    counts = {"orders": 3, "empty": 0}

    def exists(topic, partition):
        return 0 <= partition < counts.get(topic, 0)

    per_partition = GroupCoordinatorShard(0, CoordinatorConfig(), exists)
    per_topic = GroupCoordinatorShard(0, CoordinatorConfig(), exists,
                                      lambda topic: range(counts[topic]) if topic in counts else range(0))
    request = commit_request("g", {"orders": [(-1, 1), (0, 2), (2, 3), (3, 4), (2**31 - 1, 5)],
                                   "empty": [(0, 6)], "nope": [(0, 7), (1, 8)]})
    one, other = per_partition.commit_offsets(request, 8, 1, NOW), per_topic.commit_offsets(request, 8, 1, NOW)
    assert codes(one) == codes(other) == {
        ("orders", -1): ErrorCode.unknown_topic_or_partition, ("orders", 0): ErrorCode.none,
        ("orders", 2): ErrorCode.none, ("orders", 3): ErrorCode.unknown_topic_or_partition,
        ("orders", 2**31 - 1): ErrorCode.unknown_topic_or_partition,
        ("empty", 0): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition, ("nope", 1): ErrorCode.unknown_topic_or_partition}
    assert [(r.key, r.value) for r in one.records] == [(r.key, r.value) for r in other.records]
