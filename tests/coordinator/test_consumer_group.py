"""KIP-848 consumer groups on one shard, driven request by request with a manual clock.

`Log` plays the runtime: it replays a handler's records into the latest view when they are
"appended" and into the committed view when the test commits them, so every test also checks
that the state comes only from the records (a fresh shard replaying the log agrees).
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.consumer_group.assignors import range_, uniform
from tidemark.coordinator.consumer_group.heartbeat import ConsumerGroupConfig
from tidemark.coordinator.result import Result
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard
from tidemark.records.consumer_group_schema import TopicMetadata
from tidemark.wire.build import build
from tidemark.wire.api_keys import ApiKey

T0 = 1_700_000_000_000
FOO = TopicMetadata(uuid.UUID(int=1), "foo", 6)
BAR = TopicMetadata(uuid.UUID(int=2), "bar", 3)


class Log:
    def __init__(self, **consumer: Any) -> None:
        config = CoordinatorConfig(consumer=ConsumerGroupConfig(**consumer))
        self.shard = GroupCoordinatorShard(0, config, lambda topic, partition: True)
        self.records: list[Any] = []
        self.committed = 0
        self.now = T0
        self.topics = {FOO.name: FOO}
        self.tokens = iter(range(1, 10**9))

    def run(self, result: Result, token: int) -> Any:
        for record in result.records:
            self.shard.replay_appended(len(self.records), record, now_ms=self.now)
            self.records.append(record)
        self.commit()
        return result.responses.get(token)

    def commit(self) -> None:
        for offset in range(self.committed, len(self.records)):
            record = self.records[offset]
            self.shard.replay(offset, record.key, record.value, now_ms=self.now, decoded=record.decoded)
        self.committed = len(self.records)

    def heartbeat(self, member_id: str, epoch: int, *, version: int = 1, topics: list[str] | None = None,
                  owned: list[tuple[uuid.UUID, list[int]]] | None = None, regex: str | None = None,
                  instance_id: str | None = None, assignor: str | None = None, group: str = "g") -> dict[str, Any]:
        body = {"group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": instance_id,
                "rack_id": None, "rebalance_timeout": 30000 if epoch == 0 else -1,
                "subscribed_topic_names": topics if topics is not None else (["foo"] if epoch == 0 and regex is None else None),
                "subscribed_topic_regex": regex, "server_assignor": assignor,
                "topic_partitions": [] if epoch == 0 else (None if owned is None else
                                                           [{"topic_id": t, "partitions": ps} for t, ps in owned])}
        if version == 0:
            del body["subscribed_topic_regex"]
        request = build(load_request_schema(ApiKey.CONSUMER_GROUP_HEARTBEAT, version), body)
        token = next(self.tokens)
        return self.run(self.shard.consumer.heartbeat(request, version, token, self.now, self.topics, "c", "/h"), token)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.shard.poll(self.now), -1)

    def commit_offset(self, member_id: str, epoch: int, version: int = 9) -> ErrorCode:
        request = build(load_request_schema(ApiKey.OFFSET_COMMIT, version), {
            "group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": member_id, "group_instance_id": None,
            "topics": [{"name": "foo", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        token = next(self.tokens)
        return self.run(self.shard.commit_offsets(request, version, token, self.now), token)["topics"][0]["partitions"][0]["error_code"]

    def fresh(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(0, self.shard.config, lambda topic, partition: True)
        for offset, record in enumerate(self.records):
            shard.replay(offset, record.key, record.value, now_ms=self.now)
        return shard


def parts(response: dict[str, Any]) -> dict[uuid.UUID, list[int]]:
    return {tp["topic_id"]: list(tp["partitions"]) for tp in response["assignment"]["topic_partitions"]}


def owned(assignment: dict[uuid.UUID, list[int]]) -> list[tuple[uuid.UUID, list[int]]]:
    return list(assignment.items())


def test_a_member_joins_and_gets_every_partition_at_epoch_one() -> None:
    log = Log()
    response = log.heartbeat("m1", 0)
    assert response["error_code"] == ErrorCode.none
    assert response["member_epoch"] == 1 and response["heartbeat_interval"] == 5000
    assert parts(response) == {FOO.topic_id: [0, 1, 2, 3, 4, 5]}
    group = log.shard.consumer_groups.committed["g"]
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, "Stable")


def test_a_partition_moves_only_after_its_owner_revoked_it() -> None:
    log = Log()
    a = parts(log.heartbeat("a", 0))
    b = log.heartbeat("b", 0)
    # b is at epoch 2 but gets nothing yet: all of its target is still a's.
    assert b["member_epoch"] == 2 and parts(b) == {}
    # a heartbeats: it must revoke half and stays at epoch 1 until it says it did.
    ra = log.heartbeat("a", 1, owned=owned(a))
    kept = parts(ra)[FOO.topic_id]
    assert ra["member_epoch"] == 1 and len(kept) == 3
    assert log.heartbeat("b", 2)["assignment"] is None  # still unreleased: nothing new
    ra = log.heartbeat("a", 1, owned=[(FOO.topic_id, kept)])
    assert ra["member_epoch"] == 2
    rb = log.heartbeat("b", 2, owned=[])
    assert sorted(parts(rb)[FOO.topic_id] + kept) == [0, 1, 2, 3, 4, 5]
    assert log.shard.consumer_groups.committed["g"].state == "Stable"


def test_a_heartbeat_at_a_wrong_epoch_is_fenced_and_an_unknown_member_refused() -> None:
    log = Log()
    log.heartbeat("a", 0)
    response = log.heartbeat("a", 7)
    assert response["error_code"] == ErrorCode.fenced_member_epoch
    assert response["error_message"].startswith("The consumer group member has a greater member epoch (7)")
    assert log.heartbeat("zz", 1)["error_code"] == ErrorCode.unknown_member_id


def test_invalid_requests_get_kafkas_messages() -> None:
    log = Log()
    assert log.heartbeat("", 0)["error_message"] == "MemberId can't be empty."
    response = log.heartbeat("a", 0, assignor="sticky")
    assert response["error_code"] == ErrorCode.unsupported_assignor
    assert response["error_message"] == "ServerAssignor sticky is not supported. Supported assignors: uniform, range."
    assert log.heartbeat("a", -3)["error_message"] == "MemberEpoch is invalid."


def test_a_member_whose_session_ends_is_removed_and_the_group_epoch_moves() -> None:
    log = Log(session_timeout_ms=45000)
    log.heartbeat("a", 0)
    log.heartbeat("b", 0)
    log.advance(30000)
    log.heartbeat("b", 2)
    log.advance(16000)  # a's session ends; b's does not
    group = log.shard.consumer_groups.committed["g"]
    assert set(group.members) == {"b"} and group.group_epoch == 3
    response = log.heartbeat("b", 2, owned=[])
    assert response["member_epoch"] == 3 and parts(response) == {FOO.topic_id: [0, 1, 2, 3, 4, 5]}


def test_leaving_removes_the_member() -> None:
    log = Log()
    log.heartbeat("a", 0)
    response = log.heartbeat("a", -1)
    assert response["member_epoch"] == -1 and response["error_code"] == ErrorCode.none
    assert log.shard.consumer_groups.committed["g"].state == "Empty"


def test_the_group_is_rebuilt_from_its_records() -> None:
    log = Log()
    a = parts(log.heartbeat("a", 0))
    log.heartbeat("b", 0)
    log.heartbeat("a", 1, owned=owned(a))
    fresh = log.fresh().consumer_groups.committed["g"]
    live = log.shard.consumer_groups.committed["g"]
    assert (fresh.group_epoch, fresh.assignment_epoch, fresh.target, fresh.owners) == \
        (live.group_epoch, live.assignment_epoch, live.target, live.owners)
    assert {m: (v.member_epoch, v.state, v.assigned, v.pending_revocation) for m, v in fresh.members.items()} == \
        {m: (v.member_epoch, v.state, v.assigned, v.pending_revocation) for m, v in live.members.items()}


def test_offset_commits_check_the_member_epoch() -> None:
    log = Log()
    log.heartbeat("a", 0)
    assert log.commit_offset("a", 1) == ErrorCode.none
    assert log.commit_offset("a", 0) == ErrorCode.stale_member_epoch
    assert log.commit_offset("nobody", 1) == ErrorCode.unknown_member_id
    assert log.commit_offset("a", 1, version=8) == ErrorCode.unsupported_version
    assert "g" not in log.shard.groups  # the commit made no classic group of the same id


def test_offset_fetch_checks_the_member_epoch() -> None:
    log = Log()
    log.heartbeat("a", 0)
    assert log.shard.validate_offset_fetch("g", "a", 1) is None
    assert log.shard.validate_offset_fetch("g", "a", 0) == ErrorCode.stale_member_epoch
    assert log.shard.validate_offset_fetch("g", "b", 1) == ErrorCode.unknown_member_id
    assert log.shard.validate_offset_fetch("g", None, -1) is None


def test_a_regex_that_only_perl_style_engines_accept_is_refused_as_kafkas_re2j_refuses_it() -> None:
    log = Log()
    for regex in ("(?=ba)bar", "(b)a\\1", "ba(?!z)", "(?<=b)ar", "(?>ba)r", "ba++", "(?P<x>b)(?P=x)", "("):
        response = log.heartbeat("a", 0, regex=regex)
        assert response["error_code"] == ErrorCode.invalid_regular_expression, regex
        assert response["error_message"].startswith(f"SubscribedTopicRegex `{regex}` is not a valid regular "
                                                    "expression: "), response
    for regex in ("ba.*", "[(?=]ar", "b\\+a", "(?i)BAR", "(?:ba)+r", "[]b]ar"):  # RE2 takes these
        assert log.heartbeat(f"m-{regex}", 0, regex=regex)["error_code"] == ErrorCode.none, regex


def test_a_regex_subscription_picks_up_a_topic_created_later() -> None:
    log = Log()
    r = log.heartbeat("a", 0, regex="ba.*")
    assert parts(r) == {}
    log.topics = {FOO.name: FOO, BAR.name: BAR}
    r = log.heartbeat("a", 1, owned=[])
    assert r["member_epoch"] == 2 and parts(r) == {BAR.topic_id: [0, 1, 2]}


def test_a_static_member_coming_back_takes_over_its_assignment_without_a_rebalance() -> None:
    log = Log()
    first = log.heartbeat("a", 0, instance_id="i1")
    assert log.heartbeat("b", 0, instance_id="i1")["error_code"] == ErrorCode.unreleased_instance_id
    assert log.heartbeat("a", -2, instance_id="i1")["member_epoch"] == -2
    again = log.heartbeat("b", 0, instance_id="i1")
    assert again["error_code"] == ErrorCode.none
    assert again["member_epoch"] == first["member_epoch"] and parts(again) == parts(first)
    assert set(log.shard.consumer_groups.committed["g"].members) == {"b"}


def test_the_group_max_size_is_enforced() -> None:
    log = Log(max_size=1)
    log.heartbeat("a", 0)
    response = log.heartbeat("b", 0)
    assert response["error_code"] == ErrorCode.group_max_size_reached
    assert response["error_message"] == "The consumer group has reached its maximum capacity of 1 members."


def test_uniform_is_balanced_and_sticky_and_range_is_contiguous() -> None:
    topics = {"foo": FOO}
    one = uniform({"a": frozenset({"foo"}), "b": frozenset({"foo"})}, topics, {})
    assert sorted(len(v[FOO.topic_id]) for v in one.values()) == [3, 3]
    two = uniform({"a": frozenset({"foo"}), "b": frozenset({"foo"}), "c": frozenset({"foo"})}, topics, one)
    assert all(len(v[FOO.topic_id]) == 2 for v in two.values())
    assert two["a"][FOO.topic_id] <= one["a"][FOO.topic_id] and two["b"][FOO.topic_id] <= one["b"][FOO.topic_id]
    ranged = range_({"a": frozenset({"foo"}), "b": frozenset({"foo"}), "c": frozenset({"foo"}), "d": frozenset({"foo"})},
                    topics, {})
    assert [sorted(ranged[m][FOO.topic_id]) for m in "abcd"] == [[0, 1], [2, 3], [4], [5]]


def test_a_join_with_a_classic_group_of_the_same_id_is_refused() -> None:
    log = Log()
    from tidemark.coordinator.group import Group

    class Active(Group):
        pass

    group = log.shard.groups["g"] = Group("g", T0)
    group.members["x"] = object()  # type: ignore[assignment]
    from tidemark.coordinator.group import GroupState
    group.state = GroupState.STABLE
    response = log.heartbeat("a", 0)
    assert response["error_code"] == ErrorCode.group_id_not_found
    assert response["error_message"] == "Group g is not a consumer group."


def test_delete_groups_refuses_a_live_group_and_tombstones_an_empty_one() -> None:
    log = Log()
    log.heartbeat("a", 0)
    log.commit_offset("a", 1)
    token = next(log.tokens)
    assert log.run(log.shard.delete_group("g", token, log.now), token)["error_code"] == ErrorCode.non_empty_group
    log.heartbeat("a", -1)
    token = next(log.tokens)
    assert log.run(log.shard.delete_group("g", token, log.now), token)["error_code"] == ErrorCode.none
    assert "g" not in log.shard.consumer_groups.committed and "g" not in log.fresh().consumer_groups.committed
    assert log.shard.offsets.group_offsets("g") == {}


def test_list_groups_v5_filters_consumer_groups_by_type_and_state() -> None:
    from tidemark.coordinator.consumer_group.views import list_entries

    class Filter:
        def __init__(self, states=(), types=()):
            self.states_filter, self.types_filter = states, types

    log = Log()
    log.heartbeat("a", 0)
    committed = log.shard.consumer_groups.committed
    entry = {"group_id": "g", "protocol_type": "consumer", "group_state": "Stable", "group_type": "consumer"}
    assert list_entries(committed, Filter()) == [entry]
    assert list_entries(committed, Filter(types=["Consumer"])) == [entry]
    assert list_entries(committed, Filter(types=["classic"])) == []
    assert list_entries(committed, Filter(states=["stable"])) == [entry]
    assert list_entries(committed, Filter(states=["Empty"])) == []


def test_offsets_of_a_subscribed_topic_do_not_expire() -> None:
    log = Log()
    log.heartbeat("a", 0)
    log.commit_offset("a", 1)
    log.now += 8 * 24 * 3_600_000
    assert log.shard.expire_offsets(log.now, 7 * 24 * 3_600_000).records == []


def test_an_empty_consumer_group_is_deleted_once_its_last_offset_expires() -> None:
    log = Log()
    log.heartbeat("a", 0)
    log.commit_offset("a", 1)
    log.heartbeat("a", -1)  # the last member leaves: the group is Empty, its offset stays
    week = 7 * 24 * 3_600_000
    assert log.shard.expire_offsets(log.now, week).records == []  # the offset is not old enough
    log.now += week
    log.run(log.shard.expire_offsets(log.now, week), -1)
    assert "g" not in log.shard.consumer_groups.committed and not log.shard.offsets.latest_group_offsets("g")
    assert "g" not in log.fresh().consumer_groups.committed  # the tombstones delete it on load too
    assert log.shard.expire_offsets(log.now, week).records == []  # and only once


def test_partitions_handed_out_and_not_yet_reported_are_not_taken_as_revoked() -> None:
    """librdkafka reports what it has finished assigning: right after being handed partitions it
    may still report none. That is no revocation: another member gets them only once the first
    has reported them and then reported them gone."""
    log = Log()
    given = parts(log.heartbeat("a", 0))
    b = log.heartbeat("b", 0)
    assert parts(b) == {}
    still_assigning = log.heartbeat("a", 1, owned=[])  # has not applied its 6 partitions yet
    assert still_assigning["member_epoch"] == 1
    assert log.heartbeat("b", 2, owned=[])["assignment"] in (None, {"topic_partitions": []})
    log.heartbeat("a", 1, owned=owned(given))  # now it holds them all
    kept = parts(log.heartbeat("a", 1, owned=owned(given)))[FOO.topic_id]
    assert log.heartbeat("a", 1, owned=[(FOO.topic_id, kept)])["member_epoch"] == 2
    assert sorted(parts(log.heartbeat("b", 2, owned=[]))[FOO.topic_id] + kept) == [0, 1, 2, 3, 4, 5]


def test_a_member_reporting_what_it_was_told_to_keep_has_revoked_the_rest() -> None:
    """A client that applies a revocation without ever reporting the larger assignment before it
    (it skipped straight to the newer answer) is not stuck revoking."""
    log = Log()
    log.heartbeat("a", 0)
    log.heartbeat("b", 0)
    kept = parts(log.heartbeat("a", 1, owned=[]))[FOO.topic_id]  # told to keep 3
    assert log.heartbeat("a", 1, owned=[(FOO.topic_id, kept)])["member_epoch"] == 2


def test_an_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets() -> None:
    log = Log()
    assert log.commit_offset("", -1, version=8) == ErrorCode.none  # a standalone commit: an empty classic group
    assert "g" in log.shard.groups
    response = log.heartbeat("a", 0)
    assert response["error_code"] == ErrorCode.none and response["member_epoch"] == 1
    assert "g" in log.shard.consumer_groups.committed
    assert log.shard.groups.committed("g") is None
    assert log.shard.offsets.get("g", ("foo", 0)).offset == 5
    fresh = log.fresh()
    assert "g" in fresh.consumer_groups.committed and fresh.groups.committed("g") is None


def test_a_steady_member_still_sees_a_topic_created_or_grown() -> None:
    import dataclasses

    log = Log()
    first = log.heartbeat("a", 0, topics=["foo", "bar"])
    assert parts(first) == {FOO.topic_id: [0, 1, 2, 3, 4, 5]}
    steady = log.heartbeat("a", 1, owned=owned(parts(first)))
    assert (steady["member_epoch"], steady["assignment"]) == (1, None)
    records = len(log.records)
    assert log.heartbeat("a", 1)["member_epoch"] == 1 and len(log.records) == records  # nothing written
    log.topics = {FOO.name: dataclasses.replace(FOO, num_partitions=7), BAR.name: BAR}
    grown = log.heartbeat("a", 1)
    assert grown["member_epoch"] == 2
    assert parts(grown) == {FOO.topic_id: [0, 1, 2, 3, 4, 5, 6], BAR.topic_id: [0, 1, 2]}


def test_the_consumer_group_settings_have_kafkas_defaults_and_bounds() -> None:
    import pytest

    from tidemark.broker.config import BrokerConfig, ConfigError

    config = BrokerConfig({})
    assert (config["group.consumer.session.timeout.ms"], config["group.consumer.heartbeat.interval.ms"],
            config["group.consumer.max.size"], config["group.consumer.assignors"],
            config["group.consumer.migration.policy"]) == (45000, 5000, 2**31 - 1, ("uniform", "range"), "bidirectional")
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms must be between"):
        BrokerConfig({"group.consumer.session.timeout.ms": "30000"})
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms must be between"):
        BrokerConfig({"group.consumer.heartbeat.interval.ms": "20000"})
    with pytest.raises(ConfigError):
        BrokerConfig({"group.consumer.assignors": "sticky"})
    lowered = BrokerConfig({"group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000"})
    assert lowered["group.consumer.session.timeout.ms"] == 6000
