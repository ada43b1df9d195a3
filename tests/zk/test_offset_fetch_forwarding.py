"""OffsetFetch forwarding on three brokers: with offsets.fetch.forward.enable=true a broker that
does not coordinate the group answers an OffsetFetch exactly as the coordinator does (one group
or several, coordinated here or elsewhere); without it, NOT_COORDINATOR as Kafka answers."""

from __future__ import annotations

import itertools

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient
from tests.zk.offsets_cluster import (
    OFFSETS_PARTITIONS,
    WAIT_S,
    bootstrap,
    coordinator_of,
    make_brokers,
    offset_fetch,
    until,
    zk_state,
)
from tidemark.coordinator.partitioner import partition_for
from tidemark.wire.api_keys import ApiKey

COMMITTED = {0: 5, 1: 7, 2: 9}


def _start(make_broker, chroot: str, forward: bool) -> dict[int, object]:
    brokers = make_brokers(make_broker, chroot, **{"offsets.fetch.forward.enable": str(forward).lower()})
    for broker in brokers.values():
        broker.start()
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(WAIT_S)
    return brokers


def _commit(address: str, group: str) -> None:
    consumer = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("orders", p, o) for p, o in COMMITTED.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _group_led_by(zk, chroot: str, broker_id: int) -> str:
    """A group whose offsets partition broker `broker_id` leads."""
    leaders = {p: zk_state(zk, chroot, "__consumer_offsets", p)["leader"] for p in range(OFFSETS_PARTITIONS)}
    return next(g for i in itertools.count() if leaders[partition_for(g := f"group-{i}", OFFSETS_PARTITIONS)]
                == broker_id)


def _offsets(group) -> dict[int, tuple[int, str, ErrorCode]]:
    return {p.partition_index: (p.committed_offset, p.metadata, p.error_code) for t in group.topics
            for p in t.partitions}


def test_a_broker_that_is_not_the_coordinator_forwards_offset_fetch(make_broker, chroot, zk):
    brokers = _start(make_broker, chroot, forward=True)
    coordinator = coordinator_of(brokers[1].bootstrap, "ledger")
    _commit(brokers[1].bootstrap, "ledger")
    others = [i for i in brokers if i != coordinator]
    # The multi-group form (v8, kafka-python's version) and the one-group form (v6).
    for version in (8, 6):
        direct = offset_fetch(brokers[coordinator].bootstrap, "ledger", "orders", [0, 1, 2], version)
        for other in others:
            assert offset_fetch(brokers[other].bootstrap, "ledger", "orders", [0, 1, 2], version) == direct
    direct = offset_fetch(brokers[coordinator].bootstrap, "ledger", "orders", [0, 1, 2])
    assert _offsets(direct.groups[0]) == {p: (o, "", ErrorCode.none) for p, o in COMMITTED.items()}

    # Several groups in one request, one coordinated by the receiving broker, one elsewhere;
    # the connection to the coordinator is pooled: the second forward reuses it.
    here = others[0]
    local_group = until(lambda: _group_led_by(zk, chroot, here), "a group coordinated by the receiving broker")
    _commit(brokers[1].bootstrap, local_group)
    body = {"groups": [{"group_id": g, "topics": [{"name": "orders", "partition_indexes": [0, 1, 2]}]}
                       for g in ("ledger", local_group)], "require_stable": False}
    with RawClient(brokers[here].bootstrap) as raw:
        for _ in range(2):
            both = raw.request(ApiKey.OFFSET_FETCH, 8, body)
            assert [g.group_id for g in both.groups] == ["ledger", local_group]
            assert [g.error_code for g in both.groups] == [ErrorCode.none, ErrorCode.none]
            assert both.groups[0] == direct.groups[0]
            assert _offsets(both.groups[1]) == _offsets(direct.groups[0])
    assert brokers[here].log_text().count("offset_fetch_forward_failed") == 0


def test_without_forwarding_a_broker_that_is_not_the_coordinator_answers_not_coordinator(
        make_broker, chroot):
    brokers = _start(make_broker, chroot, forward=False)
    coordinator = coordinator_of(brokers[1].bootstrap, "ledger")
    _commit(brokers[1].bootstrap, "ledger")
    for other in (i for i in brokers if i != coordinator):
        answer = offset_fetch(brokers[other].bootstrap, "ledger", "orders", [0, 1, 2])
        assert answer.groups[0].error_code == ErrorCode.not_coordinator
        assert offset_fetch(brokers[other].bootstrap, "ledger", "orders", [0], 6).error_code == \
            ErrorCode.not_coordinator
