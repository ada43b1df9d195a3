"""Group: the state table, protocol selection, subscriptions, metadata round trip."""

from __future__ import annotations

import struct

import pytest

from tidemark.coordinator.group import (
    TRANSITIONS,
    Group,
    GroupState,
    IllegalStateTransition,
    Member,
)
from tidemark.records.consumer_protocol import decode_subscription_topics
from tidemark.records.offsets_schema import (
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
    encode_group_metadata_value,
)


def subscription(*topics: str, version: int = 0) -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for topic in topics:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw
    return out + struct.pack(">i", -1)  # null user data


def member(member_id: str, protocols: tuple[tuple[str, bytes], ...] = (("range", b""),),
           instance: str | None = None) -> Member:
    return Member(member_id=member_id, group_instance_id=instance, client_id="c", client_host="/h",
                  rebalance_timeout_ms=30000, session_timeout_ms=10000, protocol_type="consumer",
                  protocols=protocols)


def group_in(state: GroupState) -> Group:
    group = Group("g", 0)
    group.state = state
    return group


ALLOWED = [(source, target) for target, sources in TRANSITIONS.items() for source in sources]
ILLEGAL = [(source, target) for target in GroupState for source in GroupState
           if source not in TRANSITIONS[target]]


@pytest.mark.parametrize(("source", "target"), ALLOWED, ids=lambda s: s.value)
def test_allowed_transitions_succeed_and_stamp_time(source: GroupState, target: GroupState) -> None:
    group = group_in(source)
    group.transition_to(target, 1234)
    assert group.state is target
    assert group.state_timestamp_ms == 1234


@pytest.mark.parametrize(("source", "target"), ILLEGAL, ids=lambda s: s.value)
def test_illegal_transitions_raise(source: GroupState, target: GroupState) -> None:
    group = group_in(source)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(target, 1)
    assert group.state is source


def test_table_matches_kafka_classic_states() -> None:
    assert TRANSITIONS[GroupState.PREPARING_REBALANCE] == {
        GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    assert TRANSITIONS[GroupState.STABLE] == {GroupState.COMPLETING_REBALANCE}
    assert TRANSITIONS[GroupState.DEAD] == set(GroupState)
    assert (GroupState.EMPTY, GroupState.STABLE) in ILLEGAL
    assert (GroupState.DEAD, GroupState.EMPTY) in ILLEGAL


def test_state_values_are_kafka_names() -> None:
    assert [s.value for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]


def test_select_protocol_majority_of_preferences_among_common() -> None:
    group = Group("g", 0)
    group.add(member("a", (("roundrobin", b""), ("range", b""), ("sticky", b""))))
    group.add(member("b", (("range", b""), ("roundrobin", b""))))
    group.add(member("c", (("range", b""), ("roundrobin", b""), ("cooperative", b""))))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"


def test_select_protocol_tie_goes_to_earliest_vote() -> None:
    group = Group("g", 0)
    group.add(member("a", (("roundrobin", b""), ("range", b""))))
    group.add(member("b", (("range", b""), ("roundrobin", b""))))
    assert group.select_protocol() == "roundrobin"


def test_supports_protocols() -> None:
    group = Group("g", 0)
    assert group.supports_protocols("consumer", (("range", b""),))
    assert not group.supports_protocols("", (("range", b""),))
    assert not group.supports_protocols("consumer", ())
    group.add(member("a", (("range", b""), ("sticky", b""))))
    group.state = GroupState.STABLE
    assert group.supports_protocols("consumer", (("x", b""), ("sticky", b"")))
    assert not group.supports_protocols("consumer", (("x", b""),))
    assert not group.supports_protocols("connect", (("range", b""),))


def test_subscribed_topics() -> None:
    group = Group("g", 0)
    group.add(member("a", (("range", subscription("t1", "t2")),)))
    group.add(member("b", (("range", subscription("t3", version=3)),)))
    group.protocol = "range"
    assert group.subscribed_topics() == {"t1", "t2", "t3"}
    group.members["b"].protocols = (("range", b"\x00\x00\xff"),)
    assert group.subscribed_topics() is None
    group.protocol_type = "connect"
    assert group.subscribed_topics() is None
    empty = Group("e", 0)
    empty.protocol_type = "consumer"
    assert empty.subscribed_topics() == set()
    assert Group("simple", 0).subscribed_topics() is None
    assert decode_subscription_topics(b"") is None


def test_static_member_bookkeeping() -> None:
    group = Group("g", 0)
    group.add(member("m1", instance="i1"))
    group.add(member("m2"))
    assert group.leader == "m1"
    assert group.is_static_member_fenced("i1", "other")
    assert not group.is_static_member_fenced("i1", "m1")
    assert not group.is_static_member_fenced(None, "other")
    group.replace_static_member("i1", "m1", "m1b")
    assert list(group.members) == ["m1b", "m2"]
    assert group.leader == "m1b" and group.static_members == {"i1": "m1b"}
    group.remove("m1b")
    assert group.leader == "m2" and group.static_members == {}


def stable_value() -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="consumer", generation=7, protocol="range", leader="m1", current_state_timestamp=500,
        members=(
            MemberMetadata("m1", "i1", "c1", "/h1", 30000, 10000, subscription("t"), b"A1"),
            MemberMetadata("m2", None, "c2", "/h2", 40000, 12000, subscription("t", "u"), b"A2"),
        ))


def test_from_metadata_value_with_members_is_stable() -> None:
    group = Group.from_metadata_value("g", stable_value(), now_ms=9000)
    assert group.state is GroupState.STABLE
    assert group.generation == 7 and group.protocol == "range" and group.leader == "m1"
    assert group.protocol_type == "consumer"
    assert group.state_timestamp_ms == 500
    assert group.static_members == {"i1": "m1"}
    assert [m.assignment for m in group.members.values()] == [b"A1", b"A2"]
    assert all(m.last_heartbeat_ms == 9000 for m in group.members.values())
    assert group.subscribed_topics() == {"t", "u"}
    assert group.to_metadata_value() == stable_value()
    assert decode_group_metadata_value(encode_group_metadata_value(group.to_metadata_value())) == stable_value()


def test_from_metadata_value_without_members_is_empty() -> None:
    value = GroupMetadataValue(protocol_type="consumer", generation=3, protocol=None, leader=None,
                               current_state_timestamp=-1)
    group = Group.from_metadata_value("g", value, now_ms=1)
    assert group.state is GroupState.EMPTY
    assert group.generation == 3 and group.is_empty() and group.leader is None
    assert group.state_timestamp_ms is None
    assert group.to_metadata_value() == value
    # Empty -> PreparingRebalance is allowed after loading.
    group.transition_to(GroupState.PREPARING_REBALANCE, 2)


def test_simple_group_round_trip_has_no_protocol_type() -> None:
    value = GroupMetadataValue(protocol_type="", generation=0, protocol=None, leader=None)
    group = Group.from_metadata_value("g", value, now_ms=1)
    assert group.protocol_type is None
    assert group.to_metadata_value().protocol_type == ""
