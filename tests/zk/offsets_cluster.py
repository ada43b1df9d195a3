"""Three tidemark brokers on ZooKeeper for the offset manager's cluster tests: their settings,
the raw FindCoordinator/OffsetFetch the tests compare exactly, and waits bounded by WAIT_S."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaException

from tests.integration.raw import RawClient
from tidemark.wire.api_keys import ApiKey

WAIT_S = 60
OFFSETS_PARTITIONS = 3
SETTINGS = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
            "replica.fetch.wait.max.ms": "100", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0"}


def make_brokers(make_broker, chroot: str, count: int = 3, **extra: str) -> dict[int, Any]:
    """Brokers 1..count, not started (broker i: broker.id=i)."""
    return {i: make_broker({**SETTINGS, **extra, "zookeeper.connect": chroot, "broker.id": str(i)})
            for i in range(1, count + 1)}


def bootstrap(brokers: dict[int, Any]) -> str:
    return ",".join(b.bootstrap for b in brokers.values())


def until(condition: Callable[[], Any], what: str) -> Any:
    """condition()'s first true value, asked again until WAIT_S (a bound, not a margin)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            value = condition()
        except (KafkaException, OSError):  # a broker not answering yet: ask again
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def find_coordinator(address: str, group: str) -> Any:
    """FindCoordinator v3 (one key) asked of one broker."""
    with RawClient(address) as raw:
        return raw.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})


def coordinator_of(address: str, group: str) -> int:
    """The group's coordinator as `address` names it, once it names one."""
    return until(lambda: (r := find_coordinator(address, group)).error_code == 0 and r.node_id, "a coordinator")


def offset_fetch(address: str, group: str, topic: str, partitions: list[int], version: int = 8) -> Any:
    """OffsetFetch (v8: the multi-group form; older: one group) asked of one broker."""
    if version >= 8:
        body = {"groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}]}],
                "require_stable": False}
    else:
        body = {"group_id": group, "topics": [{"name": topic, "partition_indexes": partitions}],
                "require_stable": False}
    with RawClient(address) as raw:
        return raw.request(ApiKey.OFFSET_FETCH, version, body)


def zk_state(zk, chroot: str, topic: str, partition: int) -> dict[str, Any]:
    """A partition's leader and ISR as ZooKeeper holds them (what the cluster decided)."""
    root = "/" + chroot.split("/", 1)[1]
    data, _ = zk.get(f"{root}/brokers/topics/{topic}/partitions/{partition}/state")
    return json.loads(data)
