"""`tidemark topics`, `tidemark configs` and `tidemark leader-election` against a real broker:
kafka-topics.sh's, kafka-configs.sh's and kafka-leader-election.sh's output lines and errors."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tidemark.cli.configs import parse_add_config
from tidemark.cli.main import main
from tidemark.cli.topics import parse_replica_assignment


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin-cli") / "data",
                            {"offsets.topic.num.partitions": "3"}).start()
    try:
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def run(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--bootstrap-server", broker.bootstrap], catch_exceptions=False)


def partition_counts(bootstrap: str) -> dict[str, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=30)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def test_create_describe_alter_delete(broker: BrokerProcess) -> None:
    created = run(broker, "topics", "create", "--topic", "orders", "--partitions", "3", "--replication-factor", "1",
                  "--config", "retention.ms=60000")
    assert created.exit_code == 0, created.output
    assert created.stdout == "Created topic orders.\n"
    assert partition_counts(broker.bootstrap)["orders"] == 3

    again = run(broker, "topics", "create", "--topic", "orders", "--partitions", "3")
    assert again.exit_code == 1
    assert again.stderr == "Error while executing topic command : Topic 'orders' already exists.\n"
    quiet = run(broker, "topics", "create", "--topic", "orders", "--partitions", "3", "--if-not-exists")
    assert (quiet.exit_code, quiet.stdout, quiet.stderr) == (0, "", "")

    described = run(broker, "topics", "describe", "--topic", "orders")
    assert described.exit_code == 0, described.output
    head, *partitions = described.stdout.splitlines()
    fields = head.split("\t")
    assert fields[0] == "Topic: orders" and fields[1].startswith("TopicId: ") and len(fields[1]) > len("TopicId: ")
    assert fields[2:] == ["PartitionCount: 3", "ReplicationFactor: 1", "Configs: retention.ms=60000"]
    assert partitions == [f"\tTopic: orders\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(3)]

    # One broker, every replica in sync and led: nothing under-replicated or unavailable.
    for option in ("--under-replicated-partitions", "--unavailable-partitions"):
        only = run(broker, "topics", "describe", option)
        assert (only.exit_code, only.stdout) == (0, ""), only.output

    grown = run(broker, "topics", "alter", "--topic", "orders", "--partitions", "4")
    assert (grown.exit_code, grown.stderr) == (0, ""), grown.output
    assert partition_counts(broker.bootstrap)["orders"] == 4
    shrink = run(broker, "topics", "alter", "--topic", "orders", "--partitions", "2")
    assert shrink.exit_code == 1
    assert shrink.stderr.startswith("Error while executing topic command : ")
    assert "4 partitions" in shrink.stderr

    as_json = json.loads(run(broker, "topics", "describe", "--topic", "ord.*", "--output", "json").stdout)
    assert [(t["topic"], t["partition_count"], t["configs"]) for t in as_json] == [
        ("orders", 4, {"retention.ms": "60000"})]

    deleted = run(broker, "topics", "delete", "--topic", "orders")
    assert (deleted.exit_code, deleted.stdout, deleted.stderr) == (0, "", "")
    assert "orders" not in partition_counts(broker.bootstrap)


def test_missing_topics_fail_as_kafka_tools_do(broker: BrokerProcess) -> None:
    for command in (["describe"], ["delete"], ["alter", "--partitions", "5"]):
        result = run(broker, "topics", *command, "--topic", "no-such-topic")
        assert result.exit_code == 1
        assert result.stderr == "Error while executing topic command : Topic 'no-such-topic' does not exist as expected\n"
        tolerated = run(broker, "topics", *command, "--topic", "no-such-topic", "--if-exists")
        assert (tolerated.exit_code, tolerated.stderr) == (0, ""), tolerated.output


def test_list_and_replica_assignment(broker: BrokerProcess) -> None:
    made = run(broker, "topics", "create", "--topic", "placed", "--replica-assignment", "0,0")
    assert made.exit_code == 0, made.output
    assert partition_counts(broker.bootstrap)["placed"] == 2
    listed = run(broker, "topics", "list", "--topic", "pl.*")
    assert listed.stdout == "placed\n"
    assert json.loads(run(broker, "topics", "list", "--topic", "pl.*", "--output", "json").stdout) == ["placed"]


def test_topic_configs_alter_and_describe(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "--topic", "tuned", "--partitions", "1").exit_code == 0
    entity = ["--entity-type", "topics", "--entity-name", "tuned"]
    altered = run(broker, "configs", "alter", *entity, "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert altered.exit_code == 0, altered.output
    assert altered.stdout == "Completed updating config for topic tuned.\n"

    described = run(broker, "configs", "describe", *entity)
    assert described.exit_code == 0, described.output
    lines = described.stdout.splitlines()
    assert lines[0] == "Dynamic configs for topic tuned are:"
    assert [line.split(" synonyms=")[0] for line in lines[1:]] == [
        "  cleanup.policy=compact,delete sensitive=false",
        "  retention.ms=1000 sensitive=false",
    ]
    assert lines[2].split(" synonyms=")[1].startswith("{DYNAMIC_TOPIC_CONFIG:retention.ms=1000")

    removed = run(broker, "configs", "alter", *entity, "--delete-config", "retention.ms")
    assert removed.exit_code == 0, removed.output
    after = json.loads(run(broker, "configs", "describe", *entity, "--output", "json").stdout)
    assert [c["name"] for c in after[0]["configs"]] == ["cleanup.policy"]

    every = run(broker, "configs", "describe", *entity, "--all")
    assert every.stdout.splitlines()[0] == "All configs for topic tuned are:"
    assert any(line.startswith("  retention.ms=") and "DEFAULT_CONFIG" in line for line in every.stdout.splitlines())

    unknown = run(broker, "configs", "alter", "--entity-type", "topics", "--entity-name", "no-such-topic",
                  "--add-config", "retention.ms=1")
    assert unknown.exit_code == 1
    assert unknown.stderr.startswith("Error while executing config command: ")


def test_broker_configs_print_what_the_broker_answers(broker: BrokerProcess) -> None:
    named = run(broker, "configs", "describe", "--entity-type", "brokers", "--entity-name", "0")
    assert named.exit_code == 0, named.output
    assert named.stdout.splitlines()[0] == "Dynamic configs for broker 0 are:"
    default = run(broker, "configs", "describe", "--entity-type", "brokers", "--entity-default")
    assert default.exit_code == 0, default.output
    assert default.stdout.splitlines()[0] == "Default configs for brokers in the cluster are:"
    bad = run(broker, "configs", "describe", "--entity-type", "brokers", "--entity-name", "zero")
    assert bad.exit_code == 2
    assert "must be a valid integer broker id" in bad.output


def test_preferred_leader_election_when_the_leader_is_preferred(broker: BrokerProcess) -> None:
    assert run(broker, "topics", "create", "--topic", "elected", "--partitions", "2").exit_code == 0
    result = run(broker, "leader-election", "--election-type", "PREFERRED", "--topic", "elected", "--partition", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Valid replica already elected for partitions elected-1\n"
    usage = run(broker, "leader-election", "--election-type", "PREFERRED", "--topic", "elected")
    assert usage.exit_code == 2


def test_option_parsers() -> None:
    assert parse_add_config("a=1,b=[x,y],c=") == {"a": "1", "b": "x,y", "c": ""}
    assert parse_replica_assignment("0:1,1:2") == [[0, 1], [1, 2]]
