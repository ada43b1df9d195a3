"""`groups describe --zookeeper` against a broker with offsets.storage=zookeeper: a group of
Kafka consumers, whose offsets the broker keeps in ZooKeeper, shows its offsets once (the
cluster's view, with its members)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer

from tests.integration.clients import create_topic, produce_all
from tidemark.cli.main import main
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available

if not zookeeper_available():
    pytest.skip("ZooKeeper is not installed (make system-deps installs zookeeperd)", allow_module_level=True)


@pytest.fixture
def zookeeper(tmp_path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path / "zookeeper").start()
    yield server
    server.stop()


def test_a_group_stored_in_zookeeper_by_the_broker_is_described_once(zookeeper, make_broker) -> None:
    broker = make_broker({"offsets.storage": "zookeeper", "zookeeper.connect": zookeeper.connect,
                          "offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, "clicks", 2)
    produce_all(broker.bootstrap, "clicks", [(p, None, b"v") for p in range(2) for _ in range(3)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stored", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["clicks"])
        read = 0
        deadline = time.monotonic() + 60
        while read < 6:  # a member of the group on the cluster, reading everything
            assert time.monotonic() < deadline, "the consumer did not read the 6 records"
            message = consumer.poll(1.0)
            read += message is not None and message.error() is None
        consumer.commit(asynchronous=False)
        for args in (["stored"], ["--all-groups"]):
            result = CliRunner().invoke(main, ["groups", "describe", *args, "--output", "json", "--bootstrap-server",
                                               broker.bootstrap, "--zookeeper", zookeeper.connect])
            assert result.exit_code == 0, result.output
            described = [g for g in json.loads(result.stdout) if g["group"] == "stored"]
            assert len(described) == 1, described
            assert [(r["partition"], r["current_offset"]) for r in described[0]["partitions"]] == [(0, 3), (1, 3)]
            assert described[0]["state"] == "Stable"
    finally:
        consumer.close()
