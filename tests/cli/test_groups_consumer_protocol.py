"""`tidemark groups list/describe` with KIP-848 consumer groups (confluent-kafka consumers with
group.protocol=consumer) beside a classic group, against a real broker: the TYPE column and
--type filter, and each member's epoch with its current and target assignment (from
ConsumerGroupDescribe), in columns and in JSON."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic
from tests.integration.raw import RawClient
from tests.integration.test_consumer_protocol import CONSUMER_SETTINGS
from tidemark.cli.groups import groups
from tidemark.wire.api_keys import ApiKey

TOPIC = "moves"
PARTITIONS = 4
BOUND_S = 60.0  # a hang guard only


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-kip848") / "data", CONSUMER_SETTINGS).start()
    try:
        create_topic(process.bootstrap, TOPIC, PARTITIONS)
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def run(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner().invoke(groups, [*args, "--bootstrap-server", broker.bootstrap], catch_exceptions=False)


def consumer(broker: BrokerProcess, group: str, protocol: str = "consumer") -> Consumer:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": protocol,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
    c.subscribe([TOPIC])
    return c


def poll_until(consumers: list[Consumer], condition, what: str) -> None:
    """Poll the consumers (their rebalances run inside poll) until `condition()` holds."""
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for c in consumers:
            c.poll(0.1)


def described(broker: BrokerProcess, group: str):
    with RawClient(broker.bootstrap) as client:
        return client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group], "include_authorized_operations": False}).groups[0]


def partitions(assignment) -> list[int]:
    return sorted(p for tp in assignment.topic_partitions for p in tp.partitions)


def text(ps: list[int]) -> str:
    return f"{TOPIC}({','.join(map(str, ps))})" if ps else "-"


def test_list_shows_and_filters_group_types(broker: BrokerProcess) -> None:
    modern = consumer(broker, "list-modern")
    classic = consumer(broker, "list-classic", "classic")
    try:
        poll_until([modern, classic], lambda: modern.assignment() and classic.assignment(), "both groups to assign")
        typed = run(broker, "list", "--type")
        assert typed.exit_code == 0, typed.output
        rows = [line.split() for line in typed.stdout.splitlines()]
        assert rows[0] == ["GROUP", "TYPE"]
        assert ["list-modern", "consumer"] in rows and ["list-classic", "classic"] in rows

        only = run(broker, "list", "--type", "Consumer", "--state")
        assert [line.split() for line in only.stdout.splitlines()] == [
            ["GROUP", "TYPE", "STATE"], ["list-modern", "consumer", "Stable"]]
        as_json = json.loads(run(broker, "list", "--type", "classic", "--output", "json").stdout)
        assert as_json == [{"group": "list-classic", "state": "Stable", "type": "classic"}]
        plain = run(broker, "list")
        assert {"list-modern", "list-classic"} <= set(plain.stdout.split())

        wrong = run(broker, "list", "--type", "consumer,share")
        assert wrong.exit_code == 1
        assert wrong.stderr == "Error: Invalid types list 'consumer,share'. Valid types are: classic, consumer\n"
    finally:
        modern.close()
        classic.close()


def test_describe_members_shows_epochs_and_target_assignment(broker: BrokerProcess) -> None:
    group = "describe-modern"
    first = consumer(broker, group)
    second = None
    try:
        poll_until([first], lambda: len(first.assignment()) == PARTITIONS, "the first member to own every partition")
        # The first member stops polling, so it cannot give partitions up: once the second joins,
        # the first's target assignment is smaller than what it still owns (state Reconciling).
        second = consumer(broker, group)

        def reconciling() -> bool:
            g = described(broker, group)
            return len(g.members) == 2 and any(partitions(m.assignment) != partitions(m.target_assignment)
                                               for m in g.members)

        poll_until([second], reconciling, "the second member to be assigned partitions the first still owns")
        snapshot = described(broker, group)
        by_id = {m.member_id: m for m in snapshot.members}
        owner = next(m for m in snapshot.members if len(partitions(m.assignment)) == PARTITIONS)
        assert 0 < len(partitions(owner.target_assignment)) < PARTITIONS

        table = run(broker, "describe", group, "--members")
        assert table.exit_code == 0, table.output
        lines = [line.split() for line in table.stdout.splitlines() if line.strip()]
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT",
                  "TARGET-ASSIGNMENT"]
        assert lines[0] == header
        shown = {row[1]: dict(zip(header, row, strict=True)) for row in lines[1:]}
        assert set(shown) == set(by_id)
        for member_id, m in by_id.items():
            row = shown[member_id]
            assert row["MEMBER-EPOCH"] == str(m.member_epoch)
            assert row["#PARTITIONS"] == str(len(partitions(m.assignment)))
            assert row["ASSIGNMENT"] == text(partitions(m.assignment))
            assert row["TARGET-ASSIGNMENT"] == text(partitions(m.target_assignment))
        assert shown[owner.member_id]["ASSIGNMENT"] == text(list(range(PARTITIONS)))

        (as_json,) = json.loads(run(broker, "describe", group, "--members", "--output", "json").stdout)
        assert (as_json["group"], as_json["type"], as_json["state"]) == (group, "consumer", snapshot.group_state)
        members = {m["consumer_id"]: m for m in as_json["members"]}
        for member_id, m in by_id.items():
            assert members[member_id]["member_epoch"] == m.member_epoch
            assert [p["partition"] for p in members[member_id]["partitions"]] == partitions(m.assignment)
            assert [p["partition"] for p in members[member_id]["target_partitions"]] == \
                partitions(m.target_assignment)

        # The offsets view names each partition's current owner.
        (offsets,) = json.loads(run(broker, "describe", group, "--output", "json").stdout)
        owners = {p: m.member_id for m in snapshot.members for p in partitions(m.assignment)}
        assert {row["partition"]: row["consumer_id"] for row in offsets["partitions"]} == owners

        state = json.loads(run(broker, "describe", group, "--state", "--output", "json").stdout)
        assert [(s["type"], s["members"], s["assignment_strategy"]) for s in state] == \
            [("consumer", 2, snapshot.assignor_name)]
    finally:
        first.close()
        if second is not None:
            second.close()


def test_describe_members_of_a_classic_group_keeps_its_columns(broker: BrokerProcess) -> None:
    classic = consumer(broker, "describe-classic", "classic")
    try:
        poll_until([classic], lambda: len(classic.assignment()) == PARTITIONS, "the member to own every partition")
        table = run(broker, "describe", "describe-classic", "--members", "--verbose")
        assert table.exit_code == 0, table.output
        header, row = (line.split() for line in table.stdout.splitlines() if line.strip())
        assert header == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert (row[4], row[5]) == (str(PARTITIONS), text(list(range(PARTITIONS))))
        (as_json,) = json.loads(run(broker, "describe", "describe-classic", "--members", "--output", "json").stdout)
        assert as_json["type"] == "classic"
        assert [(m["member_epoch"], m["target_partitions"]) for m in as_json["members"]] == [(None, None)]
    finally:
        classic.close()
