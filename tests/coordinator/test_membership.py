"""GroupMembership: the classic group protocol driven with kio requests and a manual clock."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import struct
import typing
from typing import Any

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from tidemark.coordinator.group import Group, GroupState
from tidemark.coordinator.group_views import describe_groups, list_groups
from tidemark.coordinator.membership import GroupMembership
from tidemark.coordinator.rebalance import GroupConfig
from tidemark.coordinator.result import Result
from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    decode_group_metadata_value,
    decode_key,
)
from tidemark.wire.api_keys import ApiKey

LEAVE_TOKEN = 1
NONE, ILLEGAL_GENERATION, INVALID_GROUP_ID, UNKNOWN_MEMBER_ID = 0, 22, 24, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, INCONSISTENT_GROUP_PROTOCOL = 26, 27, 23
MEMBER_ID_REQUIRED, GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID = 79, 81, 82
GROUP_ID_NOT_FOUND, NOT_COORDINATOR = 69, 16

SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000


def subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        out += struct.pack(">h", len(topic)) + topic.encode()
    return out + struct.pack(">i", -1)


def build_request(api_key: int, version: int, **fields: Any) -> Any:
    """A kio request of `version`, taking only the fields that version has."""
    cls = load_request_schema(api_key, version)
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for field in dataclasses.fields(cls):
        if field.name not in fields:
            continue
        value = fields[field.name]
        if field.name in ("protocols", "assignments", "members"):
            item_type = typing.get_args(hints[field.name])[0]
            names = {f.name for f in dataclasses.fields(item_type)}
            value = tuple(item_type(**{k: v for k, v in item.items() if k in names}) for item in value)
        elif field.name in ("session_timeout", "rebalance_timeout"):
            value = datetime.timedelta(milliseconds=value)
        kwargs[field.name] = value
    return cls(**kwargs)


def join_req(version: int = 5, group: str = "g", member_id: str = "", instance: str | None = None,
             protocols: tuple[tuple[str, bytes], ...] = (("range", subscription("t")),),
             session: int = SESSION, rebalance: int = REBALANCE, protocol_type: str = "consumer") -> Any:
    return build_request(ApiKey.JOIN_GROUP, version, group_id=group, member_id=member_id, group_instance_id=instance,
                         session_timeout=session, rebalance_timeout=rebalance, protocol_type=protocol_type,
                         protocols=[{"name": n, "metadata": m} for n, m in protocols], reason=None)


def sync_req(generation: int, member_id: str, assignments: dict[str, bytes] | None = None, version: int = 3,
             group: str = "g", instance: str | None = None, protocol_type: str | None = None,
             protocol_name: str | None = None) -> Any:
    return build_request(ApiKey.SYNC_GROUP, version, group_id=group, generation_id=generation, member_id=member_id,
                         group_instance_id=instance, protocol_type=protocol_type, protocol_name=protocol_name,
                         assignments=[{"member_id": k, "assignment": v} for k, v in (assignments or {}).items()])


def hb_req(generation: int, member_id: str, group: str = "g", instance: str | None = None, version: int = 3) -> Any:
    return build_request(ApiKey.HEARTBEAT, version, group_id=group, generation_id=generation, member_id=member_id,
                         group_instance_id=instance)


def leave_req(members: list[tuple[str, str | None]], version: int = 3, group: str = "g") -> Any:
    if version < 3:
        return build_request(ApiKey.LEAVE_GROUP, version, group_id=group, member_id=members[0][0])
    return build_request(ApiKey.LEAVE_GROUP, version, group_id=group,
                         members=[{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members])


class Harness:
    def __init__(self, **config: int) -> None:
        self.groups: dict[str, Group] = {}
        counter = itertools.count(1)
        self.membership = GroupMembership(
            self.groups, GroupConfig(**config), new_member_id=lambda prefix: f"{prefix}-{next(counter)}")
        self.tokens = itertools.count(100)
        self.now = 0

    def committed(self, result: Result) -> Result:
        """The result once its group records are committed and replayed (as the runtime does):
        with the responses their replay completes."""
        for record in result.records:
            key = decode_key(record.key)
            value = None if record.value is None else decode_group_metadata_value(record.value)
            result.responses.update(self.membership.replay_group(key.group, value, self.now).responses)
        return result

    def join(self, request: Any, version: int = 5, client_id: str = "c", commit: bool = True) -> tuple[int, Result]:
        token = next(self.tokens)
        result = self.membership.join_group(request, version, token, self.now, client_id, "/127.0.0.1")
        return token, self.committed(result) if commit else result

    def sync(self, request: Any, version: int = 3, commit: bool = True) -> tuple[int, Result]:
        token = next(self.tokens)
        result = self.membership.sync_group(request, version, token, self.now)
        return token, self.committed(result) if commit else result

    def heartbeat(self, generation: int, member_id: str, **kw: Any) -> int:
        return self.membership.heartbeat(hb_req(generation, member_id, **kw), 3, self.now)["error_code"]

    def poll(self, now: int) -> Result:
        self.now = now
        return self.committed(self.membership.poll(now))

    def new_member(self, client_id: str, version: int = 5, **kw: Any) -> tuple[str, int, Result]:
        """JoinGroup as a new dynamic member: the MEMBER_ID_REQUIRED round, then the real join."""
        token, result = self.join(join_req(version, **kw), version, client_id)
        response = result.responses[token]
        assert response["error_code"] == MEMBER_ID_REQUIRED
        assert response["generation_id"] == -1
        member_id = response["member_id"]
        token, result = self.join(join_req(version, member_id=member_id, **kw), version, client_id)
        return member_id, token, result


def stable_group(h: Harness, *clients: str) -> dict[str, str]:
    """Members join (each with a MEMBER_ID_REQUIRED round), the initial delay passes, all sync."""
    ids, tokens = {}, {}
    for client in clients:
        member_id, token, result = h.new_member(client)
        assert token not in result.responses
        ids[client], tokens[client] = member_id, token
    group = h.groups["g"]
    responses: dict[int, Any] = {}
    while group.state is GroupState.PREPARING_REBALANCE:  # the initial delay, extended per member
        responses.update(h.poll(h.membership.next_deadline() or 0).responses)
    result = Result(responses=responses)
    assert group.state is GroupState.COMPLETING_REBALANCE
    for client in clients:
        assert result.responses[tokens[client]]["error_code"] == NONE
    leader = group.leader
    assert leader is not None
    for client in clients:
        if ids[client] != leader:
            h.sync(sync_req(group.generation, ids[client]))
    h.sync(sync_req(group.generation, leader, {m: m.encode() for m in ids.values()}))
    assert group.state is GroupState.STABLE
    return ids


def complete_join(h: Harness) -> dict[int, Any]:
    """Poll from deadline to deadline until the join phase is over; the responses released."""
    responses: dict[int, Any] = {}
    while h.groups["g"].state is GroupState.PREPARING_REBALANCE:
        responses.update(h.poll(h.membership.next_deadline() or 0).responses)
    return responses


def group_value(result: Result) -> GroupMetadataValue:
    (record,) = result.records
    assert decode_key(record.key) == GroupMetadataKey("g")
    assert record.value is not None
    return decode_group_metadata_value(record.value)


# -- join and sync ----------------------------------------------------------------------------------


def test_single_member_join_and_sync() -> None:
    h = Harness()
    member_id, token, result = h.new_member("c1")
    group = h.groups["g"]
    assert member_id == "c1-1"
    assert group.state is GroupState.PREPARING_REBALANCE and token not in result.responses
    assert h.membership.next_deadline() == DELAY
    h.now = DELAY - 1
    assert h.poll(DELAY - 1).responses == {}
    result = h.poll(DELAY)
    response = result.responses[token]
    assert response["error_code"] == NONE and response["generation_id"] == 1
    assert response["leader"] == member_id and response["member_id"] == member_id
    assert response["protocol_name"] == "range" and response["protocol_type"] == "consumer"
    assert response["members"] == [{"member_id": member_id, "group_instance_id": None,
                                    "metadata": subscription("t")}]
    assert group.state is GroupState.COMPLETING_REBALANCE

    sync_token, sync = h.sync(sync_req(1, member_id, {member_id: b"assigned"}))
    assert sync.responses[sync_token] == {"throttle_time": 0, "error_code": NONE, "protocol_type": "consumer",
                                          "protocol_name": "range", "assignment": b"assigned"}
    assert group.state is GroupState.STABLE
    value = group_value(sync)
    assert value == GroupMetadataValue(
        protocol_type="consumer", generation=1, protocol="range", leader=member_id,
        current_state_timestamp=DELAY,
        members=(MemberMetadata(member_id, None, "c1", "/127.0.0.1", REBALANCE, SESSION,
                                subscription("t"), b"assigned"),))


def test_three_members_leader_gets_list_followers_wait_for_assignment() -> None:
    h = Harness()
    ids, tokens = [], []
    for client in ("a", "b", "c"):
        member_id, token, result = h.new_member(client)
        assert result.responses == {}
        ids.append(member_id)
        tokens.append(token)
        h.now += 1000
    group = h.groups["g"]
    assert group.pending_members == {}
    # Each new member during the initial delay extends it (capped by the rebalance timeout).
    result = h.poll(max(h.now, DELAY))
    assert result.responses == {}
    result = h.poll(h.membership.next_deadline() or 0)
    assert set(result.responses) == set(tokens)
    leader_response = result.responses[tokens[0]]
    assert leader_response["leader"] == ids[0]
    assert [m["member_id"] for m in leader_response["members"]] == ids
    for token in tokens[1:]:
        assert result.responses[token]["members"] == [] and result.responses[token]["leader"] == ids[0]
        assert result.responses[token]["generation_id"] == 1

    t_b, r_b = h.sync(sync_req(1, ids[1]))
    t_c, r_c = h.sync(sync_req(1, ids[2]))
    assert r_b.responses == {} and r_c.responses == {}
    assert h.heartbeat(1, ids[1]) == NONE  # CompletingRebalance answers heartbeats normally
    t_a, r_a = h.sync(sync_req(1, ids[0], {ids[0]: b"A", ids[1]: b"B"}))  # c's assignment missing
    assert r_a.responses[t_a]["assignment"] == b"A"
    assert r_a.responses[t_b]["assignment"] == b"B"
    assert r_a.responses[t_c]["assignment"] == b""
    assert group.state is GroupState.STABLE
    value = group_value(r_a)
    assert value.generation == 1 and value.leader == ids[0]
    assert [(m.member_id, m.assignment) for m in value.members] == [(ids[0], b"A"), (ids[1], b"B"), (ids[2], b"")]
    # In Stable, a sync is answered at once.
    t, r = h.sync(sync_req(1, ids[1]))
    assert r.responses[t]["assignment"] == b"B" and r.records == []


def test_rebalance_completes_when_all_rejoin() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    group = h.groups["g"]
    h.now += 100
    # The leader rejoining starts a rebalance.
    ta, ra = h.join(join_req(member_id=ids["a"]))
    assert ra.responses == {} and group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(1, ids["b"]) == REBALANCE_IN_PROGRESS
    tb, rb = h.join(join_req(member_id=ids["b"]))
    assert set(rb.responses) == {ta, tb}
    assert rb.responses[ta]["generation_id"] == 2 and len(rb.responses[ta]["members"]) == 2
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_known_follower_rejoining_stable_group_unchanged_gets_current_generation() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    token, result = h.join(join_req(member_id=ids["b"]))
    assert result.responses[token]["error_code"] == NONE
    assert result.responses[token]["generation_id"] == 1 and result.responses[token]["members"] == []
    assert h.groups["g"].state is GroupState.STABLE
    # Changed metadata rebalances.
    token, result = h.join(join_req(member_id=ids["b"], protocols=(("range", subscription("t", "u")),)))
    assert result.responses == {} and h.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_join_v3_joins_directly_and_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    h = Harness()
    token, result = h.join(join_req(0), 0)
    group = h.groups["g"]
    (member,) = group.members.values()
    assert member.rebalance_timeout_ms == SESSION and result.responses == {}
    result = h.poll(DELAY)
    assert result.responses[token]["protocol_name"] == "range"
    assert result.responses[token]["member_id"] == member.member_id


def test_join_validation_errors() -> None:
    h = Harness(max_size=1)
    t, r = h.join(join_req(group=""))
    assert r.responses[t]["error_code"] == INVALID_GROUP_ID
    t, r = h.join(join_req(session=5999))
    assert r.responses[t]["error_code"] == INVALID_SESSION_TIMEOUT
    t, r = h.join(join_req(session=1_800_001))
    assert r.responses[t]["error_code"] == INVALID_SESSION_TIMEOUT
    t, r = h.join(join_req(member_id="ghost"))
    assert r.responses[t]["error_code"] == UNKNOWN_MEMBER_ID
    assert "g" not in h.groups
    t, r = h.join(join_req(protocols=()))
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    assert "g" not in h.groups
    ids = stable_group(h, "a")
    t, r = h.join(join_req(protocols=(("sticky", b""),)))
    assert r.responses[t]["error_code"] == GROUP_MAX_SIZE_REACHED
    h2 = Harness()
    stable_group(h2, "a")
    t, r = h2.join(join_req(protocols=(("sticky", b""),)))
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    t, r = h2.join(join_req(protocol_type="connect"))
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    t, r = h2.join(join_req(member_id="nobody"))
    assert r.responses[t]["error_code"] == UNKNOWN_MEMBER_ID
    assert ids


def test_pending_member_id_expires_after_session_timeout() -> None:
    h = Harness()
    t, r = h.join(join_req())
    member_id = r.responses[t]["member_id"]
    assert h.groups["g"].pending_members == {member_id: SESSION}
    assert h.membership.next_deadline() == SESSION
    h.poll(SESSION)
    assert h.groups["g"].pending_members == {}
    t, r = h.join(join_req(member_id=member_id))
    assert r.responses[t]["error_code"] == UNKNOWN_MEMBER_ID


# -- sync errors ------------------------------------------------------------------------------------


def test_sync_errors() -> None:
    h = Harness()
    ids = stable_group(h, "a")
    a = ids["a"]
    for request, code in [
        (sync_req(1, a, group=""), INVALID_GROUP_ID),
        (sync_req(1, a, group="other"), UNKNOWN_MEMBER_ID),
        (sync_req(1, "ghost"), UNKNOWN_MEMBER_ID),
        (sync_req(2, a), ILLEGAL_GENERATION),
    ]:
        t, r = h.sync(request)
        assert r.responses[t]["error_code"] == code
    t, r = h.sync(sync_req(1, a, version=5, protocol_type="connect", protocol_name="range"), version=5)
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    t, r = h.sync(sync_req(1, a, version=5, protocol_type="consumer", protocol_name="sticky"), version=5)
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    t, r = h.sync(sync_req(1, a, version=5, protocol_type="consumer", protocol_name="range"), version=5)
    assert r.responses[t]["error_code"] == NONE
    h.join(join_req(member_id=a))  # the only member rejoined: generation 2 at once
    t, r = h.sync(sync_req(1, a))
    assert r.responses[t]["error_code"] == ILLEGAL_GENERATION
    ids = stable_group(h2 := Harness(), "a", "b")
    h2.join(join_req(member_id=ids["a"]))
    t, r = h2.sync(sync_req(1, ids["b"]))
    assert r.responses[t]["error_code"] == REBALANCE_IN_PROGRESS


def test_sync_append_failure_resets_and_rebalances() -> None:
    h = Harness()
    ids = []
    tokens = []
    for client in ("a", "b"):
        member_id, token, _ = h.new_member(client)
        ids.append(member_id)
        tokens.append(token)
    complete_join(h)
    tb, rb = h.sync(sync_req(1, ids[1]))
    ta, ra = h.sync(sync_req(1, ids[0], {ids[0]: b"A", ids[1]: b"B"}), commit=False)
    group = h.groups["g"]
    # Nothing is applied before the record commits: no assignment, no Stable, nobody answered.
    assert ra.records and not ra.responses
    assert group.state is GroupState.COMPLETING_REBALANCE and all(m.assignment == b"" for m in group.members.values())
    assert ra.on_failure is not None
    # A timeout maps to COORDINATOR_NOT_AVAILABLE (Kafka's group-record error mapping).
    failed = ra.on_failure(ErrorCode.request_timed_out, h.now).responses
    assert set(failed) == {ta, tb}
    assert all(resp["error_code"] == ErrorCode.coordinator_not_available for resp in failed.values())
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in group.members.values())
    assert h.heartbeat(1, ids[0]) == REBALANCE_IN_PROGRESS


def test_new_join_during_completing_rebalance_fails_waiting_syncs() -> None:
    h = Harness()
    ids = []
    for client in ("a", "b"):
        member_id, _, _ = h.new_member(client)
        ids.append(member_id)
    complete_join(h)
    tb, _ = h.sync(sync_req(1, ids[1]))
    _, _, result = h.new_member("c")
    assert result.responses[tb]["error_code"] == REBALANCE_IN_PROGRESS
    assert h.groups["g"].state is GroupState.PREPARING_REBALANCE


# -- heartbeat --------------------------------------------------------------------------------------


def test_heartbeat_codes_in_every_state() -> None:
    h = Harness()
    assert h.heartbeat(0, "x") == UNKNOWN_MEMBER_ID  # no group
    assert h.membership.heartbeat(hb_req(0, "x", group=""), 3, 0)["error_code"] == INVALID_GROUP_ID
    h.groups["g"] = Group("g", 0)  # a simple (Empty) group
    assert h.heartbeat(0, "x") == UNKNOWN_MEMBER_ID
    member_id, token, _ = h.new_member("a")
    assert h.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(0, member_id) == REBALANCE_IN_PROGRESS
    h.poll(DELAY)
    assert h.groups["g"].state is GroupState.COMPLETING_REBALANCE
    assert h.heartbeat(1, member_id) == NONE
    assert h.heartbeat(0, member_id) == ILLEGAL_GENERATION
    assert h.heartbeat(1, "ghost") == UNKNOWN_MEMBER_ID
    h.sync(sync_req(1, member_id, {member_id: b"x"}))
    h.now = 5000
    assert h.heartbeat(1, member_id) == NONE
    assert h.groups["g"].members[member_id].last_heartbeat_ms == 5000
    h.groups["g"].transition_to(GroupState.DEAD, 5000)
    assert h.heartbeat(1, member_id) == ErrorCode.coordinator_not_available  # Kafka's answer for Dead


def test_heartbeat_in_preparing_rebalance_refreshes_session() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    h.join(join_req(member_id=ids["a"]))  # leader rejoin: rebalance
    h.now = 9000
    assert h.heartbeat(1, ids["b"]) == REBALANCE_IN_PROGRESS
    assert h.groups["g"].members[ids["b"]].last_heartbeat_ms == 9000


# -- leave, expiry, timeouts -----------------------------------------------------------------------


def test_member_leaving_starts_rebalance_others_see_rebalance_in_progress() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b", "c")
    result = h.membership.leave_group(leave_req([(ids["b"], None)]), 3, LEAVE_TOKEN, h.now)
    assert result.responses[LEAVE_TOKEN]["members"] == [
        {"member_id": ids["b"], "group_instance_id": None, "error_code": NONE}]
    assert result.records == []
    group = h.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(1, ids["a"]) == REBALANCE_IN_PROGRESS
    assert h.heartbeat(1, ids["c"]) == REBALANCE_IN_PROGRESS
    ta, _ = h.join(join_req(member_id=ids["a"]))
    tc, rc = h.join(join_req(member_id=ids["c"]))
    assert rc.responses[ta]["generation_id"] == 2
    assert [m["member_id"] for m in rc.responses[ta]["members"]] == [ids["a"], ids["c"]]


def test_leave_group_v0_and_unknown_members() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    result = h.membership.leave_group(leave_req([("ghost", None)], version=1), 1, 7, h.now)
    assert result.responses[7]["error_code"] == UNKNOWN_MEMBER_ID
    result = h.membership.leave_group(leave_req([(ids["a"], None)], version=0), 0, 8, h.now)
    assert result.responses[8]["error_code"] == NONE
    result = h.membership.leave_group(leave_req([("x", None)], group="nope"), 3, LEAVE_TOKEN, h.now)
    assert result.responses[LEAVE_TOKEN]["error_code"] == NONE
    assert result.responses[LEAVE_TOKEN]["members"][0]["error_code"] == UNKNOWN_MEMBER_ID
    result = h.membership.leave_group(leave_req([("x", None)], group=""), 3, LEAVE_TOKEN, h.now)
    assert result.responses[LEAVE_TOKEN]["error_code"] == INVALID_GROUP_ID


def test_last_member_leaving_empties_group_with_record() -> None:
    h = Harness()
    ids = stable_group(h, "a")
    h.now = 7000
    result = h.membership.leave_group(leave_req([(ids["a"], None)]), 3, LEAVE_TOKEN, h.now)
    group = h.groups["g"]
    assert group.state is GroupState.EMPTY and group.state_timestamp_ms == 7000
    value = group_value(result)
    assert value == GroupMetadataValue(protocol_type="consumer", generation=group.generation, protocol=None,
                                       leader=None, current_state_timestamp=7000, members=())
    # Kafka completes the (empty) join phase: the generation moves on and is kept. A failure
    # to store it fails nothing else: the responses go as they are.
    assert value.generation == 2
    assert result.on_failure is None
    assert h.heartbeat(2, ids["a"]) == UNKNOWN_MEMBER_ID


def test_session_expiry_removes_member_and_rebalances() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    start = h.now
    assert h.membership.next_deadline() == start + SESSION
    h.now = start + SESSION - 1
    assert h.heartbeat(1, ids["a"]) == NONE
    result = h.poll(start + SESSION)
    group = h.groups["g"]
    assert ids["b"] not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert result.records == []
    ta, ra = h.join(join_req(member_id=ids["a"]))
    assert ra.responses[ta]["generation_id"] == 2  # the only member left rejoined: done
    # Nobody heartbeats any more: the last member expires and the group empties with a record.
    h.sync(sync_req(2, ids["a"], {ids["a"]: b""}))
    result = h.poll(h.now + SESSION)
    assert group.state is GroupState.EMPTY
    assert group_value(result).members == ()


def test_rebalance_timeout_removes_member_that_did_not_rejoin() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    start = h.now
    ta, _ = h.join(join_req(member_id=ids["a"]))
    # b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins.
    for step in range(1, 4):
        h.now = start + step * 9000
        assert h.heartbeat(1, ids["b"]) == REBALANCE_IN_PROGRESS
        assert h.poll(h.now).responses == {}
    assert h.membership.next_deadline() == start + REBALANCE
    result = h.poll(start + REBALANCE)
    assert result.responses[ta]["generation_id"] == 2
    assert [m["member_id"] for m in result.responses[ta]["members"]] == [ids["a"]]
    assert list(h.groups["g"].members) == [ids["a"]]
    assert h.heartbeat(1, ids["b"]) == UNKNOWN_MEMBER_ID


def test_member_not_rejoining_in_preparing_expires_and_join_completes() -> None:
    h = Harness()
    ids = stable_group(h, "a", "b")
    start = h.now
    ta, _ = h.join(join_req(member_id=ids["a"]))
    result = h.poll(start + SESSION)  # b never heartbeats nor rejoins
    assert result.responses[ta]["generation_id"] == 2
    assert h.groups["g"].state is GroupState.COMPLETING_REBALANCE


def test_initial_rebalance_delay_extends_while_members_arrive_capped_by_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    _, t1, _ = h.new_member("a", rebalance=7000)
    group = h.groups["g"]
    assert group.join_deadline_ms == 3000
    h.now = 2000
    _, t2, _ = h.new_member("b", rebalance=7000)
    assert h.poll(3000).responses == {}  # a member arrived: wait another delay
    assert group.join_deadline_ms == 6000
    h.now = 5000
    _, t3, _ = h.new_member("c", rebalance=7000)
    assert h.poll(6000).responses == {}
    assert group.join_deadline_ms == 7000  # only 1000 ms of the rebalance timeout left
    result = h.poll(7000)
    assert set(result.responses) == {t1, t2, t3}
    assert group.state is GroupState.COMPLETING_REBALANCE


def test_initial_delay_zero_completes_at_once() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    _, token, result = h.new_member("a")
    assert result.responses[token]["generation_id"] == 1


def test_sync_timeout_removes_members_that_never_sync() -> None:
    h = Harness()
    ids = []
    for client in ("a", "b"):
        member_id, _, _ = h.new_member(client)
        ids.append(member_id)
    complete_join(h)
    start = h.now
    h.sync(sync_req(1, ids[0], {ids[0]: b"A", ids[1]: b"B"}))
    group = h.groups["g"]
    assert group.pending_sync == {ids[1]}
    h.now = start + 9000
    assert h.heartbeat(1, ids[0]) == NONE
    assert h.heartbeat(1, ids[1]) == NONE
    for step in (18000, 27000):
        h.now = start + step
        assert h.heartbeat(1, ids[0]) == NONE
        assert h.heartbeat(1, ids[1]) == NONE
    h.poll(start + REBALANCE)
    assert list(group.members) == [ids[0]]
    assert group.state is GroupState.PREPARING_REBALANCE


# -- static membership -----------------------------------------------------------------------------


def test_static_member_rejoin_replaces_id_without_rebalance_and_fences_old() -> None:
    h = Harness()
    t1, r1 = h.join(join_req(instance="i1"))
    assert r1.responses == {}  # static members skip MEMBER_ID_REQUIRED
    _, tb, _ = h.new_member("b")
    result = Result(responses=complete_join(h))
    old_id = result.responses[t1]["member_id"]
    b_id = result.responses[tb]["member_id"]
    assert old_id == "i1-1"
    h.sync(sync_req(1, b_id))
    h.sync(sync_req(1, old_id, {old_id: b"A", b_id: b"B"}, instance="i1"))
    group = h.groups["g"]
    assert group.state is GroupState.STABLE and group.leader == old_id

    # The static leader restarts (unknown member id, same instance id, same protocols).
    token, result = h.join(join_req(instance="i1"), version=9)
    response = result.responses[token]
    new_id = response["member_id"]
    assert new_id != old_id and response["error_code"] == NONE
    assert response["generation_id"] == 1 and response["leader"] == new_id
    assert response["skip_assignment"] is True and len(response["members"]) == 2
    assert group.state is GroupState.STABLE and group.generation == 1
    assert group.static_members == {"i1": new_id}
    assert group.members[new_id].assignment == b"A"
    assert [m.member_id for m in group_value(result).members] == [new_id, b_id]
    assert h.heartbeat(1, old_id, instance="i1") == FENCED_INSTANCE_ID
    t, r = h.sync(sync_req(1, old_id, instance="i1"))
    assert r.responses[t]["error_code"] == FENCED_INSTANCE_ID
    t, r = h.join(join_req(member_id=old_id, instance="i1"))
    assert r.responses[t]["error_code"] == FENCED_INSTANCE_ID
    result = h.membership.leave_group(leave_req([(old_id, "i1")]), 3, LEAVE_TOKEN, h.now)
    assert result.responses[LEAVE_TOKEN]["members"][0]["error_code"] == FENCED_INSTANCE_ID
    assert h.heartbeat(1, new_id, instance="i1") == NONE
    assert h.heartbeat(1, b_id) == NONE


def test_static_rejoin_append_failure_reverts_member_id() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    t1, r1 = h.join(join_req(instance="i1"))
    old_id = r1.responses[t1]["member_id"]
    h.sync(sync_req(1, old_id, {old_id: b"A"}, instance="i1"))
    token, result = h.join(join_req(instance="i1"), commit=False)
    new_id = result.responses[token]["member_id"]
    assert result.responses[token]["members"] == []  # before v9: no member list, no skip
    group = h.groups["g"]
    # The new id takes the old one's place only when its record commits.
    assert group.static_members == {"i1": old_id} and list(group.members) == [old_id]
    failed = result.on_failure(ErrorCode.not_leader_or_follower, h.now).responses
    assert failed[token]["error_code"] == NOT_COORDINATOR and failed[token]["member_id"] == ""
    assert group.static_members == {"i1": old_id} and list(group.members) == [old_id]
    assert new_id not in group.members and group.leader == old_id and not group.pending_replacements


def test_static_rejoin_with_changed_protocol_rebalances() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    t1, r1 = h.join(join_req(instance="i1"))
    old_id = r1.responses[t1]["member_id"]
    h.sync(sync_req(1, old_id, {old_id: b"A"}, instance="i1"))
    t, r = h.join(join_req(instance="i1", protocols=(("sticky", b""),)))
    assert r.responses[t]["error_code"] == INCONSISTENT_GROUP_PROTOCOL  # no protocol in common
    token, result = h.join(join_req(instance="i1", protocols=(("sticky", b""), ("range", b""))))
    group = h.groups["g"]
    # Only member rejoined with a new protocol: the rebalance completes at once.
    assert result.responses[token]["generation_id"] == 2
    assert group.protocol == "sticky"


def test_admin_removal_of_static_member_by_instance_id() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    t1, r1 = h.join(join_req(instance="i1"))
    member_id = r1.responses[t1]["member_id"]
    result = h.membership.leave_group(leave_req([("", "i1"), ("", "i2")]), 4, LEAVE_TOKEN, h.now)
    assert [m["error_code"] for m in result.responses[LEAVE_TOKEN]["members"]] == [NONE, UNKNOWN_MEMBER_ID]
    assert member_id not in h.groups["g"].members
    assert h.groups["g"].state is GroupState.EMPTY


def test_static_member_not_rejoining_is_kept_through_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    # A long session timeout: the rebalance timeout runs out first.
    t1, r1 = h.join(join_req(instance="i1", session=60_000))
    static_id = r1.responses[t1]["member_id"]
    group = h.groups["g"]
    assert group.generation == 1
    dyn_id, td, _ = h.new_member("d", session=60_000)
    result = h.poll(REBALANCE)
    # The static member did not rejoin but keeps its place; the join completes without it.
    assert result.responses[td]["generation_id"] == 2
    assert list(group.members) == [static_id, dyn_id] and group.leader == dyn_id
    assert [m["member_id"] for m in result.responses[td]["members"]] == [static_id, dyn_id]
    assert h.heartbeat(1, static_id, instance="i1") == ILLEGAL_GENERATION


# -- describe / list / remove ----------------------------------------------------------------------


def test_describe_groups() -> None:
    h = Harness()
    ids = stable_group(h, "a")
    h.groups["simple"] = Group("simple", 0)
    request = build_request(ApiKey.DESCRIBE_GROUPS, 5, groups=("g", "simple", "missing"), include_authorized_operations=False)
    response = describe_groups(h.groups, request, 5)
    g, simple, missing = response["groups"]
    assert g["group_state"] == "Stable" and g["protocol_type"] == "consumer" and g["protocol_data"] == "range"
    assert g["members"] == [{"member_id": ids["a"], "group_instance_id": None, "client_id": "a",
                             "client_host": "/127.0.0.1", "member_metadata": subscription("t"),
                             "member_assignment": ids["a"].encode()}]
    assert simple["group_state"] == "Empty" and simple["protocol_type"] == "" and simple["members"] == []
    assert missing["error_code"] == NONE and missing["group_state"] == "Dead"
    assert describe_groups(h.groups, request, 6)["groups"][2]["error_code"] == GROUP_ID_NOT_FOUND
    # Outside Stable: no protocol, metadata or assignment.
    h.join(join_req(member_id=ids["a"]))
    g = describe_groups(h.groups, request, 5)["groups"][0]
    assert g["group_state"] == "CompletingRebalance" and g["protocol_data"] == ""
    assert g["members"][0]["member_metadata"] == b"" and g["members"][0]["member_assignment"] == b""


def test_list_groups_with_filters() -> None:
    h = Harness()
    stable_group(h, "a")
    h.groups["simple"] = Group("simple", 0)
    listed = list_groups(h.groups, build_request(ApiKey.LIST_GROUPS, 3), 3)["groups"]
    assert {(g["group_id"], g["group_state"], g["protocol_type"]) for g in listed} == {
        ("g", "Stable", "consumer"), ("simple", "Empty", "")}
    only_stable = list_groups(h.groups, build_request(ApiKey.LIST_GROUPS, 4, states_filter=("stable",)), 4)["groups"]
    assert [g["group_id"] for g in only_stable] == ["g"]
    classic = list_groups(h.groups, build_request(ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("classic",)), 5)
    assert len(classic["groups"]) == 2 and classic["groups"][0]["group_type"] == "classic"
    consumer = list_groups(h.groups, build_request(ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("consumer",)), 5)
    assert consumer["groups"] == []


def test_remove_group_answers_held_requests() -> None:
    h = Harness()
    _, token, _ = h.new_member("a")
    result = h.membership.remove_group("g", now_ms=10)
    assert result.responses[token]["error_code"] == NOT_COORDINATOR
    assert "g" not in h.groups
    assert h.membership.next_deadline() is None
    assert h.membership.remove_group("g").responses == {}


@pytest.mark.parametrize("version", [0, 1, 3, 4, 5, 6, 7, 8, 9])
def test_join_every_version(version: int) -> None:
    h = Harness(initial_rebalance_delay_ms=0)
    token, result = h.join(join_req(version), version)
    response = result.responses[token]
    if version >= 4:
        assert response["error_code"] == MEMBER_ID_REQUIRED
        token, result = h.join(join_req(version, member_id=response["member_id"]), version)
        response = result.responses[token]
    assert response["error_code"] == NONE and response["generation_id"] == 1
    assert response["protocol_name"] == "range"


def _wire(api_key: int, version: int, response: dict[str, Any]) -> Any:
    """The response as a client decodes it from the bytes this version puts on the wire."""
    import io

    from kio.index import load_response_schema
    from kio.serial import entity_reader, entity_writer

    from tidemark.wire.build import build

    cls = load_response_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, build(cls, response))
    decoded, _ = entity_reader(cls)(buffer.getvalue(), 0)
    return decoded


@pytest.mark.parametrize("version", range(0, 10))
def test_join_and_sync_responses_encode_for_every_version(version: int) -> None:
    h = Harness()
    token, result = h.join(join_req(min(version, 9)), version)
    if version < 4:  # held until the join phase completes
        (member_id,) = h.groups["g"].members
    else:
        required = _wire(ApiKey.JOIN_GROUP, version, result.responses[token])
        member_id = result.responses[token]["member_id"]
        assert (required.error_code, required.member_id) == (MEMBER_ID_REQUIRED, member_id) and member_id
        token, result = h.join(join_req(version, member_id=member_id), version)
    responses = complete_join(h)
    joined = _wire(ApiKey.JOIN_GROUP, version, responses[token])
    assert (joined.error_code, joined.generation_id, joined.member_id, joined.leader) == (NONE, 1, member_id, member_id)
    assert joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member_id, subscription("t"))]
    sync_version = min(version, 5)
    t, r = h.sync(sync_req(1, member_id, {member_id: b"x"}, version=sync_version), sync_version)
    synced = _wire(ApiKey.SYNC_GROUP, sync_version, r.responses[t])
    assert (synced.error_code, synced.assignment) == (NONE, b"x")
    t, r = h.sync(sync_req(9, member_id, version=sync_version), sync_version)
    assert _wire(ApiKey.SYNC_GROUP, sync_version, r.responses[t]).error_code == ILLEGAL_GENERATION
    hb_version = min(version, 4)
    beat = h.membership.heartbeat(hb_req(1, member_id, version=min(hb_version, 4)), hb_version, 0)
    assert _wire(ApiKey.HEARTBEAT, hb_version, beat).error_code == NONE
    leave_version = min(version, 5)
    r = h.membership.leave_group(leave_req([(member_id, None)], version=leave_version), leave_version, 1, h.now)
    left = _wire(ApiKey.LEAVE_GROUP, leave_version, r.responses[1])
    assert left.error_code == NONE
    if leave_version >= 3:  # batch leave: one answer per member
        assert [(m.member_id, m.error_code) for m in left.members] == [(member_id, NONE)]
    describe = build_request(ApiKey.DESCRIBE_GROUPS, min(version, 5), groups=("g", "x"), include_authorized_operations=False)
    described = _wire(ApiKey.DESCRIBE_GROUPS, min(version, 5), describe_groups(h.groups, describe, min(version, 5)))
    assert [(g.group_id, g.error_code, g.group_state) for g in described.groups] == [
        ("g", NONE, "Empty"), ("x", NONE, "Dead")]  # its only member left
    list_version = min(version, 5)
    listed = _wire(ApiKey.LIST_GROUPS, list_version, list_groups(h.groups, build_request(ApiKey.LIST_GROUPS, list_version), list_version))
    assert listed.error_code == NONE and [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]
