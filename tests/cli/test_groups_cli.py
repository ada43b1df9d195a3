"""`tidemark groups list|describe|delete|delete-offsets` against a real broker, over the Kafka protocol."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess, free_port
from tests.integration.clients import create_topic, produce_all
from tidemark.cli.groups import groups
from tidemark.cli.output import format_table

GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "100", "offsets.topic.num.partitions": "10"}
TOPIC = "orders"
# Partition -> messages produced. Partition 2 stays empty and is never committed.
PRODUCED = {0: 5, 1: 7, 2: 0}
# What the consumers commit: partition 0 fully, partition 1 only up to 3 (lag 4), partition 2 nothing.
COMMITS = {0: 5, 1: 3}

OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                  "CLIENT-ID", "LAG-SECONDS", "STATUS"]


def _broker_with_topic(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-cli") / "data", GROUP_SETTINGS).start()
    try:
        create_topic(process.bootstrap, TOPIC, 3)
        produce_all(process.bootstrap, TOPIC,
                    [(p, b"k", b"v%d" % i) for p, count in PRODUCED.items() for i in range(count)])
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    yield from _broker_with_topic(tmp_path_factory)


def start_consumer(bootstrap: str, group: str, client_id: str) -> Consumer:
    """Join `group`, read every message, commit COMMITS; the consumer stays a member until closed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "enable.partition.eof": False, "log_level": 0})
    consumer.subscribe([TOPIC])
    wanted = sum(PRODUCED.values())
    seen = 0
    deadline = time.monotonic() + 30
    while (seen < wanted or len(consumer.assignment()) < 3) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == wanted and len(consumer.assignment()) == 3, (seen, consumer.assignment())
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITS.items()], asynchronous=False)
    return consumer


@pytest.fixture(scope="module")
def running(broker: BrokerProcess) -> Iterator[Consumer]:
    """Group "live" with one consumer that stays in the group for the whole module."""
    consumer = start_consumer(broker.bootstrap, "live", "client-live")
    yield consumer
    consumer.close()


@pytest.fixture(scope="module")
def closed(broker: BrokerProcess) -> str:
    """Group "idle": consumed, committed, then the consumer left."""
    start_consumer(broker.bootstrap, "idle", "client-idle").close()
    return "idle"


@pytest.fixture(scope="module")
def live_and_idle_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of its own with just the groups "live" (its member stays) and "idle" (its member
    left), so what `list` shows does not depend on which other tests ran before."""
    for process in _broker_with_topic(tmp_path_factory):
        consumer = start_consumer(process.bootstrap, "live", "client-live")
        start_consumer(process.bootstrap, "idle", "client-idle").close()
        yield process
        consumer.close()


def run(*args: str) -> Result:
    return CliRunner().invoke(groups, list(args), catch_exceptions=False)


def table(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def test_list_shows_the_group(live_and_idle_only: BrokerProcess) -> None:
    result = run("list", "--bootstrap-server", live_and_idle_only.bootstrap)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["idle", "live"]


def test_list_with_state(live_and_idle_only: BrokerProcess) -> None:
    result = run("list", "--state", "--bootstrap-server", live_and_idle_only.bootstrap)
    assert result.exit_code == 0, result.output
    assert table(result.stdout) == [["GROUP", "STATE"], ["idle", "Empty"], ["live", "Stable"]]


def test_describe_offsets_per_partition(broker: BrokerProcess, running: Consumer) -> None:
    result = run("describe", "live", "--bootstrap-server", broker.bootstrap)
    assert result.exit_code == 0, result.output
    assert "no active members" not in result.stdout
    rows = table(result.stdout)
    assert rows[0] == OFFSETS_HEADER
    member_id = running.memberid()
    assert member_id
    # Partition 1 lags: its time lag is the age of the record at offset 3 (checked exactly in
    # test_group_lag.py); one commit is no history to judge, so OK.
    assert [row[:9] + row[10:] for row in rows[1:]] == [
        ["live", TOPIC, "0", "5", "5", "0", member_id, "127.0.0.1", "client-live", "OK"],
        ["live", TOPIC, "1", "3", "7", "4", member_id, "127.0.0.1", "client-live", "OK"],
        ["live", TOPIC, "2", "-", "0", "-", member_id, "127.0.0.1", "client-live", "-"],
    ]
    assert rows[1][9] == "0.000" and float(rows[2][9]) >= 0 and rows[3][9] == "-"
    # Plain aligned columns: every row starts each column at the same character position.
    lines = result.stdout.splitlines()
    column = lines[0].index("LOG-END-OFFSET")
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in lines)


def test_describe_members(broker: BrokerProcess, running: Consumer) -> None:
    result = run("describe", "live", "--members", "--bootstrap-server", broker.bootstrap)
    assert result.exit_code == 0, result.output
    assert table(result.stdout) == [
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
        ["live", running.memberid(), "127.0.0.1", "client-live", "3"],
    ]
    verbose = run("describe", "live", "--members", "--verbose", "--bootstrap-server", broker.bootstrap)
    assert verbose.exit_code == 0, verbose.output
    assert table(verbose.stdout)[0][-1] == "ASSIGNMENT"
    assert table(verbose.stdout)[1][-1] == f"{TOPIC}(0,1,2)"


def test_describe_state_stable(broker: BrokerProcess, running: Consumer) -> None:
    result = run("describe", "live", "--state", "--bootstrap-server", broker.bootstrap)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
    assert lines[1].split() == ["live", f"{broker.bootstrap}", "(0)", "range", "Stable", "1"]


def test_describe_group_without_members(broker: BrokerProcess, closed: str) -> None:
    result = run("describe", closed, "--bootstrap-server", broker.bootstrap)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "Consumer group 'idle' has no active members."
    rows = table(result.stdout)[1:]
    assert rows == [
        OFFSETS_HEADER,
        # Only committed partitions: nobody owns partition 2 and it has no offset.
        ["idle", TOPIC, "0", "5", "5", "0", "-", "-", "-", "0.000", "OK"],
        ["idle", TOPIC, "1", "3", "7", "4", "-", "-", "-", rows[2][9], "OK"],
    ]

    state = run("describe", closed, "--state", "--bootstrap-server", broker.bootstrap)
    assert state.exit_code == 0, state.output
    assert table(state.stdout)[1][-2:] == ["Empty", "0"]

    members = run("describe", closed, "--members", "--bootstrap-server", broker.bootstrap)
    assert members.exit_code == 0, members.output
    assert table(members.stdout) == [
        ["Consumer", "group", "'idle'", "has", "no", "active", "members."],
        ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"],
    ]


def test_unknown_group(broker: BrokerProcess) -> None:
    for view in ([], ["--members"], ["--state"]):
        result = run("describe", "no-such-group", *view, "--bootstrap-server", broker.bootstrap)
        assert result.exit_code == 1
        assert result.stderr.strip() == "Consumer group 'no-such-group' does not exist."
        assert result.stdout == ""


def test_unreachable_bootstrap_server_fails_fast() -> None:
    address = f"127.0.0.1:{free_port()}"
    for args in (["list"], ["describe", "any"]):
        started = time.monotonic()
        result = run(*args, "--bootstrap-server", address)
        assert time.monotonic() - started < 5
        assert result.exit_code == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and address in lines[0] and "cannot reach" in lines[0], result.stderr
        assert result.stdout == ""


def test_silent_server_is_bounded_by_timeout() -> None:
    """Something accepts TCP connections but never answers a Kafka request: --timeout bounds the wait."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        address = f"127.0.0.1:{listener.getsockname()[1]}"
        for args in (["list"], ["describe", "any"]):
            started = time.monotonic()
            result = run(*args, "--bootstrap-server", address, "--timeout", "1000")
            assert time.monotonic() - started < 6
            assert result.exit_code == 1
            assert address in result.stderr and "Timed out" in result.stderr, result.stderr
            assert len(result.stderr.strip().splitlines()) == 1


def test_format_table_aligns_and_dashes_unknowns() -> None:
    assert format_table(["A", "LONGER"], [["xyz", None], ["1", 22]]).splitlines() == [
        "A    LONGER",
        "xyz  -",
        "1    22",
    ]


# -- delete and delete-offsets (new groups only: "live" and "idle" stay for the tests above) ----


def committed_offsets(bootstrap: str, group: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=10)
    result = futures[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == TOPIC and tp.offset >= 0}


def test_delete_refused_with_members_then_succeeds_after_close(broker: BrokerProcess) -> None:
    consumer = start_consumer(broker.bootstrap, "doomed", "client-doomed")
    try:
        refused = run("delete", "doomed", "--bootstrap-server", broker.bootstrap)
        assert refused.exit_code == 1
        assert refused.stderr.splitlines() == [
            "Error: Deletion of some consumer groups failed:",
            "* Group 'doomed' could not be deleted due to: NON_EMPTY_GROUP",
        ]
        assert refused.stdout == ""
        assert committed_offsets(broker.bootstrap, "doomed") == COMMITS
    finally:
        consumer.close()

    deleted = run("delete", "doomed", "--bootstrap-server", broker.bootstrap)
    assert deleted.exit_code == 0, deleted.output
    assert deleted.stdout == "Deletion of requested consumer groups ('doomed') was successful.\n"
    assert committed_offsets(broker.bootstrap, "doomed") == {}
    gone = run("describe", "doomed", "--bootstrap-server", broker.bootstrap)
    assert gone.exit_code == 1 and "does not exist" in gone.stderr


def test_delete_several_groups_reports_each(broker: BrokerProcess) -> None:
    for group in ("spent-a", "spent-b"):
        start_consumer(broker.bootstrap, group, f"client-{group}").close()
    both = run("delete", "spent-a", "spent-b", "--bootstrap-server", broker.bootstrap)
    assert both.exit_code == 0, both.output
    assert both.stdout == "Deletion of requested consumer groups ('spent-a', 'spent-b') was successful.\n"

    start_consumer(broker.bootstrap, "spent-c", "client-spent-c").close()
    mixed = run("delete", "spent-c", "never-was", "--bootstrap-server", broker.bootstrap)
    assert mixed.exit_code == 1
    assert mixed.stderr.splitlines() == [
        "Error: Deletion of some consumer groups failed:",
        "* Group 'never-was' could not be deleted due to: GROUP_ID_NOT_FOUND",
    ]
    assert mixed.stdout == "These consumer groups were deleted successfully: 'spent-c'\n"


def test_delete_offsets_refused_for_a_subscribed_topic_then_succeeds_when_empty(broker: BrokerProcess) -> None:
    consumer = start_consumer(broker.bootstrap, "pruned", "client-pruned")
    try:
        refused = run("delete-offsets", "pruned", "--topic", TOPIC, "--topic", "no-such-topic",
                      "--bootstrap-server", broker.bootstrap)
        assert refused.exit_code == 1
        assert refused.stderr.strip() == "Error: Encountered some partition level error(s), see the follow-up details:"
        assert table(refused.stdout) == [
            ["TOPIC", "PARTITION", "STATUS"],
            ["no-such-topic", "Not", "Provided", "Error:", "UNKNOWN_TOPIC_OR_PARTITION"],
            [TOPIC, "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
            [TOPIC, "1", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
            [TOPIC, "2", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC"],
        ]
        assert committed_offsets(broker.bootstrap, "pruned") == COMMITS
    finally:
        consumer.close()

    one = run("delete-offsets", "pruned", "--topic", f"{TOPIC}:1", "--bootstrap-server", broker.bootstrap)
    assert one.exit_code == 0, one.output
    assert one.stdout.splitlines()[0] == f"Request succeeded for deleting offsets with topic {TOPIC}:1 group pruned"
    assert table(one.stdout)[1:] == [["TOPIC", "PARTITION", "STATUS"], [TOPIC, "1", "Successful"]]
    assert committed_offsets(broker.bootstrap, "pruned") == {0: COMMITS[0]}

    rest = run("delete-offsets", "pruned", "--topic", TOPIC, "--bootstrap-server", broker.bootstrap)
    assert rest.exit_code == 0, rest.output
    assert table(rest.stdout)[-3:] == [[TOPIC, str(p), "Successful"] for p in range(3)]
    assert committed_offsets(broker.bootstrap, "pruned") == {}


def test_delete_offsets_of_an_unknown_group(broker: BrokerProcess) -> None:
    result = run("delete-offsets", "no-such-group", "--topic", TOPIC, "--bootstrap-server", broker.bootstrap)
    assert result.exit_code == 1
    assert result.stderr.strip() == "Consumer group 'no-such-group' does not exist."
    assert result.stdout == ""


def test_delete_and_delete_offsets_fail_fast_when_unreachable() -> None:
    address = f"127.0.0.1:{free_port()}"
    for args in (["delete", "any"], ["delete-offsets", "any", "--topic", "t:0"]):
        started = time.monotonic()
        result = run(*args, "--bootstrap-server", address)
        assert time.monotonic() - started < 5
        assert result.exit_code == 1
        assert "cannot reach" in result.stderr and address in result.stderr, result.stderr
