"""`tidemark groups describe --zookeeper`: a group of ZooKeeper consumers shows its offsets from
/consumers/[group]/offsets, the owner of each partition and the lag against the log end."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.integration.clients import create_topic, produce_all
from tests.zk.consumer_process import ConsumerProcess, Journal

TOPIC, GROUP = "zkd-t", "zkd-group"


def describe(zookeeper, broker, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemark.cli", "groups", "describe", *args,
                           "--bootstrap-server", broker.bootstrap, "--zookeeper", zookeeper.connect],
                          capture_output=True, text=True, timeout=120)


def rows(result: subprocess.CompletedProcess[str]) -> list[dict]:
    assert result.returncode == 0, result.stderr
    [group] = [g for g in json.loads(result.stdout) if g["group"] == GROUP]
    assert group["storage"] == "zookeeper"
    return group["partitions"]


def test_describe_shows_zookeeper_groups_offsets_owners_and_lag(zookeeper, zk, make_broker, tmp_path) -> None:
    broker = make_broker({"offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, TOPIC, 3)
    produce_all(broker.bootstrap, TOPIC, [(p, None, b"v") for p in range(3) for _ in range(10)])
    journal = Journal()
    consumer = ConsumerProcess(journal, zookeeper.connect, broker.bootstrap, GROUP, TOPIC,
                               {"offsets.storage": "zookeeper", "auto.offset.reset": "smallest",
                                "auto.commit.interval.ms": "100"}, tmp_path).start()
    try:
        journal.wait_for(lambda: {o for e in journal.of("committed") for o in e["offsets"].items()}
                         >= {(f"{TOPIC}/{p}", 10) for p in range(3)}, "all 30 records committed")
        live = rows(describe(zookeeper, broker, GROUP, "--output", "json"))
        assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"]) for r in live] \
            == [(p, 10, 10, 0, f"{consumer.consumer_id}-0") for p in range(3)]
        table = describe(zookeeper, broker, GROUP)
        assert table.returncode == 0, table.stderr
        assert "offsets in ZooKeeper, 1 live consumer" in table.stdout
        assert f"{consumer.consumer_id}-0" in table.stdout
    finally:
        consumer.terminate()

    produce_all(broker.bootstrap, TOPIC, [(1, None, b"v") for _ in range(4)])
    gone = rows(describe(zookeeper, broker, "--all-groups", "--output", "json"))
    assert [(r["partition"], r["current_offset"], r["log_end_offset"], r["lag"], r["consumer_id"]) for r in gone] \
        == [(0, 10, 10, 0, None), (1, 10, 14, 4, None), (2, 10, 10, 0, None)]
    assert [int(zk.get(f"/consumers/{GROUP}/offsets/{TOPIC}/{p}")[0]) for p in range(3)] == [10, 10, 10]
