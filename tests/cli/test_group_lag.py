"""`tidemark groups describe`: lag in seconds and Burrow's status over the wire, checked against
records with known timestamps and scripted commit histories."""

from __future__ import annotations

import itertools
import json
import time

from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic
from tidemark.cli.groups import groups

WAIT_S = 30.0
_names = itertools.count()


def produce_at(bootstrap: str, topic: str, timestamps: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for ts in timestamps:
        producer.produce(topic, value=b"v", partition=0, timestamp=ts)
    assert producer.flush(WAIT_S) == 0


def commit(bootstrap: str, group: str, topic: str, offset: int) -> None:
    """A standalone commit (no group membership), as a Spark job or a tool makes."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def describe(bootstrap: str, *args: str) -> Result:
    return CliRunner().invoke(groups, ["describe", *args, "--bootstrap-server", bootstrap], catch_exceptions=False)


def described(bootstrap: str, *groups_: str) -> list[dict]:
    args = [arg for group in groups_ for arg in ("--group", group)]
    result = describe(bootstrap, *args, "--output", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def setup(bootstrap: str, timestamps: list[int]) -> tuple[str, str]:
    n = next(_names)
    topic, group = f"lag-{n}", f"lag-group-{n}"
    create_topic(bootstrap, topic, 1)
    produce_at(bootstrap, topic, timestamps)
    return topic, group


def test_time_lag_is_the_age_of_the_first_unconsumed_record(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    hour_ago = int(time.time() * 1000) - 3_600_000
    stamps = [hour_ago + i * 60_000 for i in range(6)]  # one a minute, an hour ago
    topic, group = setup(bootstrap, stamps)
    for offset in (2, 4):
        commit(bootstrap, group, topic, offset)
        before = time.time() * 1000
        [answer] = described(bootstrap, group)
        after = time.time() * 1000
        [row] = answer["partitions"]
        assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (offset, 6, 6 - offset)
        # now - timestamp of the record at the committed offset, now taken during the command.
        assert (before - stamps[offset]) / 1000 - 0.001 <= row["lag_seconds"] <= (after - stamps[offset]) / 1000 + 0.001
        assert 0 <= row["last_commit_age_seconds"] <= (after - before) / 1000 + WAIT_S
    commit(bootstrap, group, topic, 6)
    [answer] = described(bootstrap, group)
    assert answer["partitions"][0]["lag"] == 0 and answer["partitions"][0]["lag_seconds"] == 0
    assert answer["status"] == "OK" and answer["partitions"][0]["status"] == "OK"


def test_a_rewound_group_is_rewind_and_err(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic, group = setup(bootstrap, [int(time.time() * 1000)] * 10)
    for offset in (5, 7, 3):
        commit(bootstrap, group, topic, offset)
    [answer] = described(bootstrap, group)
    assert answer["partitions"][0]["status"] == "REWIND"
    assert answer["status"] == "ERR"
    table = describe(bootstrap, group)
    assert table.exit_code == 0, table.output
    assert table.stdout.splitlines()[-1].split()[-1] == "REWIND"


def test_several_groups_and_all_groups(group_broker: BrokerProcess) -> None:
    bootstrap = group_broker.bootstrap
    topic, first = setup(bootstrap, [int(time.time() * 1000)] * 3)
    second = f"{first}-b"
    commit(bootstrap, first, topic, 1)
    commit(bootstrap, second, topic, 2)
    answers = described(bootstrap, first, second)
    assert [(a["group"], a["partitions"][0]["lag"]) for a in answers] == [(first, 2), (second, 1)]

    everything = describe(bootstrap, "--all-groups", "--output", "json")
    assert everything.exit_code == 0, everything.output
    assert {first, second} <= {a["group"] for a in json.loads(everything.stdout)}

    # Tables, one per group, separated by a blank line; a missing group is named and fails the exit code.
    tables = describe(bootstrap, first, "--group", "no-such-group", "--group", second)
    assert tables.exit_code == 1
    assert tables.stderr.strip() == "Consumer group 'no-such-group' does not exist."
    blocks = [block.splitlines() for block in tables.stdout.strip().split("\n\n")]
    assert [lines[-1].split()[0] for lines in blocks if lines[0].startswith("GROUP")] == [first, second]


def test_usage() -> None:
    runner = CliRunner()
    for args in ([], ["g", "--all-groups"], ["g", "--members", "--state"], ["g", "--offsets", "--members"]):
        result = runner.invoke(groups, ["describe", *args, "--bootstrap-server", "127.0.0.1:9"])
        assert result.exit_code == 2, result.output
