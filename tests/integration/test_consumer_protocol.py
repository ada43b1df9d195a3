"""confluent-kafka consumers with group.protocol=consumer (KIP-848) against a real broker.

Each member is a process of its own (tests/integration/kip848_member.py) reporting its
rebalance callbacks, records and commits. While records are produced, members join, close and
are SIGKILLed; the test checks from the reports that no partition was held by two members at
any moment, that every record was consumed, that commits at the member's epoch were accepted,
and that the offsets committed at the end are the log end offsets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import GROUP_SETTINGS
from tests.integration.clients import create_topic
from tests.integration.raw import RawClient
from tidemark.wire.api_keys import ApiKey

PARTITIONS = 6
RECORDS = 3000
BOUND_S = 120.0  # a hang guard only
CONSUMER_SETTINGS = {
    **GROUP_SETTINGS,
    # A SIGKILLed member is noticed within 6 s (Kafka's bounds allow it once the minimum is lowered).
    "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
}
ROOT = Path(__file__).resolve().parents[2]


class Member:
    def __init__(self, bootstrap: str, group: str, topic: str, name: str, protocol: str) -> None:
        self.name = name
        self.events: list[dict] = []
        self.killed_at: float | None = None
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.kip848_member", bootstrap, group, topic, name, protocol],
            stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.events.append(json.loads(line))

    def held(self) -> set[int]:
        held: set[int] = set()
        for event in list(self.events):
            if event["kind"] == "assign":
                held |= set(event["partitions"])
            elif event["kind"] in ("revoke", "lost"):
                held -= set(event["partitions"])
        return held if self.killed_at is None and self.process.poll() is None else set()

    def close(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(BOUND_S)
        self._reader.join(BOUND_S)

    def kill(self) -> None:
        self.killed_at = time.monotonic()
        self.process.kill()
        self.process.wait(BOUND_S)
        self._reader.join(BOUND_S)


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _balanced(members: list[Member], sizes: list[int]) -> bool:
    held = [m.held() for m in members]
    everything = sorted(p for h in held for p in h)
    return everything == list(range(PARTITIONS)) and sorted(map(len, held)) == sorted(sizes)


def _intervals(member: Member) -> list[tuple[int, float, float]]:
    """(partition, from, to) for every time the member held a partition."""
    start: dict[int, float] = {}
    out = []
    for event in member.events:
        if event["kind"] == "assign":
            for p in event["partitions"]:
                start[p] = event["t"]
        elif event["kind"] in ("revoke", "lost"):
            for p in event["partitions"]:
                out.append((p, start.pop(p), event["t"]))
    end = member.killed_at if member.killed_at is not None else float("inf")
    out += [(p, t, end) for p, t in start.items()]
    return out


def _produce(bootstrap: str, topic: str, done: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
        if i % 50 == 49:
            producer.flush(BOUND_S)
            time.sleep(0.01)  # spread the records over the rebalances (not a correctness margin)
    producer.flush(BOUND_S)
    done.set()


def _commit_v9(bootstrap: str, group: str, topic: str, member_id: str, epoch: int) -> int:
    with RawClient(bootstrap) as client:
        response = client.request(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member_id,
            "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": RECORDS // PARTITIONS, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        return response.topics[0].partitions[0].error_code


def _describe(bootstrap: str, group: str):
    with RawClient(bootstrap) as client:
        return client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_members_join_close_and_die_while_records_flow(make_broker, protocol):
    broker = make_broker(CONSUMER_SETTINGS).start()
    topic, group = f"flow-{protocol}", f"group-{protocol}"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produced = threading.Event()
    producer = threading.Thread(target=_produce, args=(broker.bootstrap, topic, produced), daemon=True)
    members = [Member(broker.bootstrap, group, topic, name, protocol) for name in ("a", "b", "c")]
    try:
        producer.start()
        _wait(lambda: _balanced(members, [2, 2, 2]), "three members holding two partitions each")
        members.append(Member(broker.bootstrap, group, topic, "d", protocol))
        _wait(lambda: _balanced(members, [1, 1, 2, 2]), "a fourth member to get its share")
        members[0].close()
        _wait(lambda: _balanced(members[1:], [2, 2, 2]), "a's partitions to go to the others after it closed")
        members[1].kill()
        _wait(lambda: _balanced(members[2:], [3, 3]), "b's partitions to go to the others after its session")
        _wait(produced.is_set, "the producer")
        consumed = lambda: {e["value"] for m in members for e in list(m.events) if e["kind"] == "record"}  # noqa: E731
        _wait(lambda: len(consumed()) == RECORDS, "every record to be consumed")
        assert consumed() == {str(i) for i in range(RECORDS)}

        if protocol == "consumer":
            described = _describe(broker.bootstrap, group)
            assert described.error_code == 0 and len(described.members) == 2
            live = described.members[0]
            assert _commit_v9(broker.bootstrap, group, topic, live.member_id, live.member_epoch) == 0
            stale = _commit_v9(broker.bootstrap, group, topic, live.member_id, live.member_epoch - 1)
            assert stale == 113  # STALE_MEMBER_EPOCH

        # Let the survivors commit what they consumed last, then read the group's offsets back.
        for member in members[2:]:
            member.close()
    finally:
        for member in members:
            if member.process.poll() is None:
                member.kill()

    # No partition held by two members at once, as the clients reported it.
    intervals = [(m.name, *i) for m in members for i in _intervals(m)]
    for name, partition, start, end in intervals:
        for other, p, s, e in intervals:
            if other != name and p == partition:
                assert end <= s or e <= start, f"partition {partition} held by {name} and {other} at once"
    # Every record's commit is accepted, at the latest after retries of those that raced an
    # epoch bump (refused STALE_MEMBER_EPOCH, never anything else).
    commits = [e for m in members for e in m.events if e["kind"] == "commit"]
    if protocol == "classic":  # commits racing a classic rebalance fail, as Kafka answers them
        assert commits and {e["error"] for e in commits} <= {0, 22, 27}  # ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS
    else:
        assert commits and {e["error"] for e in commits} <= {0, 113}
    for member in members if protocol == "consumer" else ():
        events = [e for e in member.events if e["kind"] in ("record", "commit")]
        for i, event in enumerate(events):
            if event["kind"] == "record" and member.killed_at is None:
                after = [e for e in events[i + 1:] if e["kind"] == "commit" or e["kind"] == "record"]
                outcome = next((e for e in after if e["kind"] == "record" or e["error"] == 0), None)
                assert outcome is not None and outcome["kind"] == "commit", f"{member.name}: {event} not committed"

    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        checker.close()
    assert [tp.offset for tp in committed] == [RECORDS // PARTITIONS] * PARTITIONS


def _produce_values(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, value=value.encode())
    producer.flush(BOUND_S)


def test_a_regex_subscription_picks_up_a_topic_created_later(make_broker):
    broker = make_broker(CONSUMER_SETTINGS).start()
    create_topic(broker.bootstrap, "orders-eu", 2)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "regex", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    seen: set[tuple[str, str]] = set()
    try:
        consumer.subscribe(["^orders-.*"])
        _produce_values(broker.bootstrap, "orders-eu", ["eu-1"])
        create_topic(broker.bootstrap, "orders-us", 3)
        _produce_values(broker.bootstrap, "orders-us", ["us-1"])
        create_topic(broker.bootstrap, "other", 1)
        _produce_values(broker.bootstrap, "other", ["no"])
        deadline = time.monotonic() + BOUND_S
        while {("orders-eu", "eu-1"), ("orders-us", "us-1")} - seen:
            assert time.monotonic() < deadline, f"regex subscription consumed only {seen}"
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                seen.add((message.topic(), message.value().decode()))
        described = _describe(broker.bootstrap, "regex")
        (member,) = described.members
        assert member.subscribed_topic_regex is not None
        assert sorted(tp.topic_name for tp in member.assignment.topic_partitions) == ["orders-eu", "orders-us"]
        with RawClient(broker.bootstrap) as client:
            # DescribeGroups (up to v5 here) describes a consumer group as Kafka 4.x: Dead, no members.
            classic = client.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["regex"], "include_authorized_operations": False}).groups[0]
            assert (classic.error_code, classic.group_state, classic.members) == (0, "Dead", ())
            listed = client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["consumer"]}).groups
            assert [(g.group_id, g.group_type, g.protocol_type) for g in listed] == [("regex", "consumer", "consumer")]
            assert client.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["classic"]}).groups == ()
            # A classic member cannot join a consumer group of the same id.
            joined = client.request(ApiKey.JOIN_GROUP, 5, {
                "group_id": "regex", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]})
            assert joined.error_code == 23  # INCONSISTENT_GROUP_PROTOCOL
    finally:
        consumer.close()
    assert ("other", "no") not in seen


def test_the_group_comes_back_from_the_log_after_a_broker_restart(make_broker):
    broker = make_broker(CONSUMER_SETTINGS).start()
    topic, group = "restart", "restart-group"
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = [Member(broker.bootstrap, group, topic, name, "consumer") for name in ("a", "b", "c")]
    try:
        _wait(lambda: _balanced(members, [2, 2, 2]), "three members holding two partitions each")
        _wait(lambda: _describe(broker.bootstrap, group).group_state == "Stable", "a stable group")
        before = _describe(broker.bootstrap, group)
        broker.stop()
        broker.start()
        after = _describe(broker.bootstrap, group)  # answered from the log, before any heartbeat counts
        assert (after.error_code, after.group_epoch, after.assignment_epoch) == \
            (0, before.group_epoch, before.assignment_epoch)

        def members_of(described):
            return {m.member_id: (m.member_epoch, sorted(p for tp in m.assignment.topic_partitions
                                                          for p in tp.partitions)) for m in described.members}

        assert members_of(after) == members_of(before)
        # The members carry on at their epochs: records produced now are consumed, nobody lost
        # its partitions (a member the broker forgot would be fenced and report them lost).
        _produce_values(broker.bootstrap, topic, [f"after-{i}" for i in range(60)])
        consumed = lambda: {e["value"] for m in members for e in list(m.events) if e["kind"] == "record"}  # noqa: E731
        _wait(lambda: {f"after-{i}" for i in range(60)} <= consumed(), "records produced after the restart")
        assert not [e for m in members for e in m.events if e["kind"] == "lost"]
        assert _describe(broker.bootstrap, group).group_epoch == before.group_epoch
    finally:
        for member in members:
            member.kill()
