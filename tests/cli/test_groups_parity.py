"""kafka-consumer-groups.sh's options beyond the basics, against a real broker: list --state
filters, describe's views exclude each other, delete --all-groups, reset-offsets over several
groups, --command-config files, --output json on every view."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tidemark.cli.groups import groups
from tidemark.cli.properties import parse_properties, to_librdkafka

TOPIC = "events"
WAIT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups-parity") / "data",
                            {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0"}).start()
    try:
        create_topic(process.bootstrap, TOPIC, 2)
        produce_all(process.bootstrap, TOPIC, [(p, b"k", b"v%d" % i) for p in (0, 1) for i in range(6)])
        yield process
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def run(broker: BrokerProcess, *args: str) -> Result:
    return CliRunner().invoke(groups, [*args, "--bootstrap-server", broker.bootstrap], catch_exceptions=False)


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def commit(broker: BrokerProcess, group: str, offsets: dict[int, int]) -> None:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p, o) for p, o in offsets.items()])
    client = admin(broker)  # held: a collected AdminClient never completes its futures
    client.alter_consumer_group_offsets([request], request_timeout=WAIT_S)[group].result(WAIT_S)


def committed(broker: BrokerProcess, group: str) -> dict[int, int]:
    client = admin(broker)
    futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=WAIT_S)
    return {tp.partition: tp.offset for tp in futures[group].result(WAIT_S).topic_partitions if tp.offset >= 0}


def member(broker: BrokerProcess, group: str) -> Consumer:
    """A consumer that stays in `group` (Stable) until closed."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 0,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    while not consumer.assignment():
        consumer.poll(0.2)
    return consumer


def test_list_filters_by_state(broker: BrokerProcess) -> None:
    commit(broker, "parked", {0: 1})
    consumer = member(broker, "busy")
    try:
        stable = run(broker, "list", "--state", "stable")
        assert stable.exit_code == 0, stable.output
        assert [line.split() for line in stable.stdout.splitlines()] == [["GROUP", "STATE"], ["busy", "Stable"]]
        both = json.loads(run(broker, "list", "--state", "Stable,Empty", "--output", "json").stdout)
        assert {"group": "busy", "state": "Stable"} in both and {"group": "parked", "state": "Empty"} in both
        assert {entry["state"] for entry in both} == {"Stable", "Empty"}
    finally:
        consumer.close()
    wrong = run(broker, "list", "--state", "Stable,Sleeping")
    assert wrong.exit_code == 1
    assert wrong.stderr == ("Error: Invalid state list 'Stable,Sleeping'. Valid states are: PreparingRebalance, "
                            "CompletingRebalance, Stable, Dead, Empty\n")


def test_describe_views_exclude_each_other_and_all_answer_json(broker: BrokerProcess) -> None:
    commit(broker, "viewed", {0: 2, 1: 5})
    both = run(broker, "describe", "viewed", "--members", "--offsets")
    assert both.exit_code == 2
    assert "takes at most one of these options" in both.output
    members = json.loads(run(broker, "describe", "viewed", "--members", "--output", "json").stdout)
    assert members == [{"group": "viewed", "type": "classic", "state": "Empty", "members": []}]
    state = json.loads(run(broker, "describe", "viewed", "--state", "--output", "json").stdout)
    assert [(s["group"], s["state"], s["members"], s["coordinator"]["id"]) for s in state] == [("viewed", "Empty", 0, 0)]
    offsets = json.loads(run(broker, "describe", "viewed", "--offsets", "--output", "json").stdout)
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"]) for r in offsets[0]["partitions"]] \
        == [(0, 2, 6, 4), (1, 5, 6, 1)]


def test_reset_offsets_of_several_groups(broker: BrokerProcess) -> None:
    commit(broker, "reset-a", {0: 4, 1: 4})
    commit(broker, "reset-b", {0: 5})
    consumer = member(broker, "reset-live")
    try:
        result = run(broker, "reset-offsets", "--group", "reset-a", "--group", "reset-b", "--group", "reset-live",
                     "--all-topics", "--shift-by", "-1", "--execute")
    finally:
        consumer.close()
    assert result.exit_code == 1
    assert result.stderr.splitlines()[0] == ("Error: Assignments can only be reset if the group 'reset-live' is "
                                             "inactive, but the current state is Stable.")
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["reset-a", TOPIC, "0", "3"], ["reset-a", TOPIC, "1", "3"], ["reset-b", TOPIC, "0", "4"]]
    assert committed(broker, "reset-a") == {0: 3, 1: 3} and committed(broker, "reset-b") == {0: 4}

    exported = run(broker, "reset-offsets", "reset-a", "reset-b", "--topic", f"{TOPIC}:0", "--to-earliest", "--export")
    assert exported.exit_code == 0, exported.output
    assert exported.stdout == f"reset-a,{TOPIC},0,0\nreset-b,{TOPIC},0,0\n"


def test_delete_all_groups(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "data", {"offsets.topic.num.partitions": "1"}).start()
    try:
        create_topic(process.bootstrap, TOPIC, 2)
        for group in ("gone-a", "gone-b"):
            commit(process, group, {0: 0})
        result = run(process, "delete", "--all-groups")
        assert result.exit_code == 0, result.output
        assert result.stdout == "Deletion of requested consumer groups ('gone-a', 'gone-b') was successful.\n"
        assert run(process, "list").stdout == ""
        usage = run(process, "delete", "gone-a", "--all-groups")
        assert usage.exit_code == 2
    finally:
        try:
            process.stop()
        finally:
            process.kill()


def test_command_config_file(broker: BrokerProcess, tmp_path: Path) -> None:
    good = tmp_path / "client.properties"
    good.write_text("# as Kafka's tools take it\nclient.id = from-file\nrequest.timeout.ms: 20000\n")
    listed = run(broker, "list", "--command-config", str(good))
    assert listed.exit_code == 0, listed.output
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.client.property=1\n")
    refused = run(broker, "list", "--command-config", str(bad))
    assert refused.exit_code == 1
    assert "invalid client configuration" in refused.stderr and "no.such.client.property" in refused.stderr


def test_properties_parser() -> None:
    text = ("# comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism : PLAIN\nkey\\:with\\=escapes value\n"
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
            "    username=\"alice\" password=\"s3cret\";\n")
    properties = parse_properties(text)
    assert properties["security.protocol"] == "SASL_SSL"
    assert properties["sasl.mechanism"] == "PLAIN"
    assert properties["key:with=escapes"] == "value"
    config = to_librdkafka(properties)
    assert (config["sasl.username"], config["sasl.password"]) == ("alice", "s3cret")
    assert "sasl.jaas.config" not in config
