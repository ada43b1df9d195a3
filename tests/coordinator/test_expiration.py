"""KIP-211 offset expiration on a coordinator shard with a manual clock, one test per row."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.coordinator.test_group import member, subscription
from tests.coordinator.test_shard import NOW, InMemoryLog, commit_request, new_shard
from tidemark.coordinator.group import Group, GroupState
from tidemark.records.offsets_schema import GroupMetadataKey, OffsetCommitKey, decode_key

RETENTION = 7 * 24 * 3600 * 1000  # offsets.retention.minutes = 10080
HOUR = 3600 * 1000


def commit(shard, log, group, offsets, at=NOW, retention=-1, version=8):
    result = shard.commit_offsets(commit_request(group, {"orders": offsets}, version=version, retention=retention),
                                  version, 1, at)
    log.append_and_replay(shard, result, now=at)


def expire(shard, log, at):
    result = shard.expire_offsets(at, RETENTION)
    log.append_and_replay(shard, result, now=at)
    return [decode_key(r.key) for r in result.records if r.value is None]


def consumer_group(shard, group_id, state, topics=("orders",), at=NOW):
    """A consumer group with one member subscribed to `topics`, moved to `state` through legal steps."""
    group = shard.groups[group_id] = Group(group_id, at)
    group.protocol_type = "consumer"
    group.add(member("m1", (("range", subscription(*topics)),)))
    group.transition_to(GroupState.PREPARING_REBALANCE, at)
    if state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
        group.transition_to(GroupState.COMPLETING_REBALANCE, at)
        group.protocol = "range"
    if state is GroupState.STABLE:
        group.transition_to(GroupState.STABLE, at)
    if state is GroupState.EMPTY:
        group.remove("m1")
        group.transition_to(GroupState.EMPTY, at)
    return group


def test_standalone_offsets_expire_from_each_commit():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "solo", [(0, 5)], at=NOW)
    commit(shard, log, "solo", [(1, 6)], at=NOW + HOUR)
    assert expire(shard, log, NOW + RETENTION - 1) == []
    assert expire(shard, log, NOW + RETENTION) == [OffsetCommitKey("solo", "orders", 0)]
    # The last offset goes an hour later, and with it the (Empty, simple) group: Dead + tombstone.
    assert expire(shard, log, NOW + RETENTION + HOUR) == [OffsetCommitKey("solo", "orders", 1),
                                                         GroupMetadataKey("solo")]
    assert "solo" not in shard.groups and shard.offsets.group_offsets("solo") == {}
    fresh = new_shard()
    log.replay_into(fresh)  # a restart never resurrects them
    assert fresh.offsets.group_offsets("solo") == {} and "solo" not in fresh.groups


def test_empty_consumer_group_expires_from_when_it_became_empty():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "cg", [(0, 5)], at=NOW)  # an old commit...
    consumer_group(shard, "cg", GroupState.EMPTY, at=NOW + 10 * HOUR)  # ...then the group emptied later
    assert expire(shard, log, NOW + RETENTION + HOUR) == []  # counted from Empty, not from the commit
    assert expire(shard, log, NOW + 10 * HOUR + RETENTION) == [OffsetCommitKey("cg", "orders", 0),
                                                              GroupMetadataKey("cg")]


def test_stable_group_keeps_subscribed_offsets_however_old_kafka_4682():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "active", [(0, 5)], at=NOW)
    commit(shard, log, "active", [(1, 9)], at=NOW)
    consumer_group(shard, "active", GroupState.STABLE, topics=("orders",))
    assert expire(shard, log, NOW + 100 * RETENTION) == []
    assert shard.offsets.get("active", ("orders", 0)).offset == 5


def test_stable_group_expires_topics_it_no_longer_subscribes_to():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "moved", [(0, 5)], at=NOW)
    consumer_group(shard, "moved", GroupState.STABLE, topics=("payments",))
    assert expire(shard, log, NOW + RETENTION) == [OffsetCommitKey("moved", "orders", 0)]
    assert shard.groups["moved"].state is GroupState.STABLE  # a live group is never made Dead


def test_rebalancing_group_keeps_everything():
    for state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE):
        shard, log = new_shard(), InMemoryLog()
        commit(shard, log, "busy", [(0, 5)], at=NOW)
        consumer_group(shard, "busy", state, topics=("payments",))
        assert expire(shard, log, NOW + 100 * RETENTION) == [], state


def test_explicit_retention_uses_the_expire_timestamp():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "explicit", [(0, 5)], at=NOW, retention=HOUR, version=2)  # standalone
    assert expire(shard, log, NOW + HOUR - 1) == []
    assert expire(shard, log, NOW + HOUR) == [OffsetCommitKey("explicit", "orders", 0),
                                              GroupMetadataKey("explicit")]


def test_explicit_retention_applies_only_where_the_offset_may_expire_at_all():
    """Kafka applies an expire timestamp only to offsets its group's expiration condition
    considers: a live group keeps the topics it consumes, a rebalancing group keeps everything."""
    shard, log = new_shard(), InMemoryLog()
    for group_id in ("consuming", "moved", "busy"):
        commit(shard, log, group_id, [(0, 5)], at=NOW, retention=HOUR, version=2)
    consumer_group(shard, "consuming", GroupState.STABLE, topics=("orders",))
    consumer_group(shard, "moved", GroupState.STABLE, topics=("payments",))
    consumer_group(shard, "busy", GroupState.PREPARING_REBALANCE, topics=("payments",))
    assert expire(shard, log, NOW + HOUR - 1) == []
    # At the expire timestamp (long before the broker's retention) only the topic "moved" left.
    assert expire(shard, log, NOW + HOUR) == [OffsetCommitKey("moved", "orders", 0)]
    assert expire(shard, log, NOW + 100 * RETENTION) == []
    assert shard.offsets.get("consuming", ("orders", 0)).offset == 5
    assert shard.offsets.get("busy", ("orders", 0)).offset == 5


def test_pending_commits_are_skipped():
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "pending", [(0, 5)], at=NOW)
    in_flight = shard.commit_offsets(commit_request("pending", {"orders": [(0, 6)]}), 8, 2, NOW + RETENTION)
    first = log.append_pending(shard, in_flight, now=NOW + RETENTION)
    # The commit in flight is the offset expiry decides on (the latest view): it is fresh.
    assert shard.expire_offsets(NOW + RETENTION, RETENTION).records == []
    log.commit_from(shard, first, in_flight, now=NOW + RETENTION)
    assert shard.offsets.get("pending", ("orders", 0)).offset == 6
    assert in_flight.responses[2]["topics"][0]["partitions"][0]["error_code"] == ErrorCode.none


def test_an_empty_group_with_a_commit_in_flight_keeps_its_group_record():
    """A standalone (Empty) group whose only committed offset expires while a commit to another
    partition is in flight: expiry tombstones the expired offset only, never the group (whose
    commit in flight would then outlive its group, invisible to ListGroups and DeleteGroups)."""
    shard, log = new_shard(), InMemoryLog()
    commit(shard, log, "emptied", [(0, 5)], at=NOW)
    in_flight = shard.commit_offsets(commit_request("emptied", {"orders": [(1, 9)]}), 8, 2, NOW + RETENTION)
    first = log.append_pending(shard, in_flight, now=NOW + RETENTION)
    result = shard.expire_offsets(NOW + RETENTION, RETENTION)
    assert [decode_key(r.key) for r in result.records] == [OffsetCommitKey("emptied", "orders", 0)]
    log.commit_from(shard, first, in_flight, now=NOW + RETENTION)
    log.append_and_replay(shard, result, now=NOW + RETENTION)
    fresh = new_shard()
    log.replay_into(fresh)  # what a restart loads: the group and its newer offset
    assert "emptied" in fresh.groups and fresh.offsets.get("emptied", ("orders", 1)).offset == 9
    assert fresh.offsets.get("emptied", ("orders", 0)) is None
