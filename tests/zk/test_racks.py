"""Racks (KIP-36) and fetch from follower (KIP-392) on a real ZooKeeper.

Kafka's rack-aware assignment (AdminUtils.assignReplicasToBrokers, its AdminRackAwareTest
values), its refusal of brokers with and without racks mixed, and three tidemark broker
processes in two racks: the racks are registered and shown, new topics are spread over them, and
a confluent-kafka consumer with client.rack reads a topic led in the other rack from the follower
in its own, as the brokers' fetch request counters show."""

from __future__ import annotations

import json
import random
import re
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import free_port
from tests.integration.raw import RawClient, fetch_body
from tests.zk.test_cluster_brokers import _bootstrap, _metadata, _until
from tidemark.cluster.zk import topic_admin, zk_data
from tidemark.cluster.zk.assignment import RackAwareMode, assign_replicas_to_brokers, rack_alternated
from tidemark.cluster.zk.errors import RackInformationError
from tidemark.cluster.zk.registration import ensure_persistent_paths
from tidemark.cluster.zk.session import connect

WAIT_S = 60
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
FETCH, METADATA = 1, 3


# -- assignment ------------------------------------------------------------------------------------

def test_rack_aware_assignment_is_kafkas():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas_to_brokers(list(racks), 7, 3, start_index=0, start_partition_id=0, racks=racks) == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3), 6: (0, 4, 2)}


@pytest.mark.parametrize("seed", range(20))
def test_no_two_replicas_share_a_rack_while_a_rack_has_none(seed):
    rng = random.Random(seed)
    brokers = list(range(rng.randint(3, 9)))
    racks = {b: f"rack{rng.randrange(3)}" for b in brokers}
    rack_count = len(set(racks.values()))
    replication_factor = rng.randint(1, len(brokers))
    assignment = assign_replicas_to_brokers(brokers, 12, replication_factor, rng=rng, racks=racks)
    for replicas in assignment.values():
        assert len(set(replicas)) == replication_factor
        assert len({racks[b] for b in replicas}) == min(replication_factor, rack_count)


def test_brokers_with_and_without_racks_are_refused_unless_racks_are_ignored(chroot):
    client = connect(chroot, 10_000)
    try:
        ensure_persistent_paths(client)
        for broker, rack in ((1, "az-a"), (2, "az-b"), (3, None)):
            info = zk_data.BrokerInfo(broker, "h", 1, rack=rack)
            client.create(zk_data.broker_path(broker), zk_data.encode_broker(info))
        with pytest.raises(RackInformationError):
            topic_admin.create_topic(client, "enforced", 3, 2)
        assert client.exists(zk_data.topic_path("enforced")) is None
        # Kafka's RackAwareMode.Safe (the broker's own topics): rack-unaware round robin.
        created = topic_admin.create_topic(client, "safe", 3, 2, rack_aware_mode=RackAwareMode.SAFE, start_index=0)
        assert created.partitions == {0: (1, 2), 1: (2, 3), 2: (3, 1)}
    finally:
        client.stop()
        client.close()


# -- three brokers in two racks --------------------------------------------------------------------

RACKS = {1: "az-a", 2: "az-b", 3: "az-b"}


def _rack_cluster(make_broker, chroot: str) -> dict[int, object]:
    settings = {"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "3000",
                "replica.lag.time.max.ms": "10000", "replica.fetch.wait.max.ms": "100",
                "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "2",
                "num.partitions": "3", "default.replication.factor": "2", "replica.selector.class": RACK_AWARE}
    brokers = {}
    for broker_id, rack in RACKS.items():
        metrics_port = free_port()
        broker = make_broker({**settings, "broker.id": str(broker_id), "broker.rack": rack},
                             extra_args=("--metrics-port", str(metrics_port)))
        broker.metrics_port = metrics_port
        brokers[broker_id] = broker.start()
    return brokers


def _fetches(broker, kind: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf'^tidemark_fetch_requests_total\{{kind="{kind}"\}} (\S+)$', text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_consumer_reads_from_the_follower_in_its_rack(make_broker, chroot, zk):
    brokers = _rack_cluster(make_broker, chroot)
    bootstrap = _bootstrap(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # Registered (ZooKeeper-era tools read it there) and shown to clients.
    root = "/" + chroot.split("/", 1)[1]
    for broker_id, rack in RACKS.items():
        assert json.loads(zk.get(f"{root}/brokers/ids/{broker_id}")[0])["rack"] == rack
    described = admin.describe_cluster().result(WAIT_S)
    assert {node.id: node.rack for node in described.nodes} == RACKS

    # New topics are spread over the racks: az-a's one broker holds a replica of every partition,
    # and leadership still goes round all three brokers.
    admin.create_topics([NewTopic("spread", 6, 2)])["spread"].result(WAIT_S)
    spread = _metadata(admin, "spread").topics["spread"].partitions
    assert all({RACKS[b] for b in p.replicas} == {"az-a", "az-b"} for p in spread.values())
    assert sorted(p.replicas[0] for p in spread.values()) == [1, 1, 2, 2, 3, 3]

    # So are the topics the brokers create themselves: auto-created ones and the offsets topic.
    with RawClient(brokers[2].bootstrap) as raw:
        for topic in ("auto", "__consumer_offsets"):
            raw.request(METADATA, 9, {"topics": [{"name": topic}], "allow_auto_topic_creation": True,
                                      "include_cluster_authorized_operations": False,
                                      "include_topic_authorized_operations": False})
    for topic in ("auto", "__consumer_offsets"):
        _until(lambda: len(_metadata(admin, topic).topics[topic].partitions) == 3, f"{topic} created")
        created = _metadata(admin, topic).topics[topic].partitions
        assert all({RACKS[b] for b in p.replicas} == {"az-a", "az-b"} for p in created.values()), topic

    # "near" is led in az-a; its follower, broker 2, is in az-b.
    admin.create_topics([NewTopic("near", 1, replica_assignment=[[1, 2]])])["near"].result(WAIT_S)
    _until(lambda: sorted(_metadata(admin, "near").topics["near"].partitions[0].isrs) == [1, 2],
           "both replicas in sync")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(100):
        producer.produce("near", f"record-{i}".encode(), partition=0)
    assert producer.flush(WAIT_S) == 0

    # On the wire: the leader sends an az-b consumer to broker 2, with no records.
    with RawClient(brokers[1].bootstrap) as raw:
        body = fetch_body([("near", 0, 0, 1 << 20)])
        body["rack_id"] = "az-b"
        answer = raw.request(FETCH, 11, body).responses[0].partitions[0]
        assert (answer.error_code, answer.preferred_read_replica, answer.records or b"") == (0, 2, b"")

    leader_before = _fetches(brokers[1], "consumer")
    follower_before = _fetches(brokers[2], "consumer")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "near-readers", "client.rack": "az-b",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition("near", 0, 0)])
    read = []
    deadline = time.monotonic() + WAIT_S
    while len(read) < 100:
        assert time.monotonic() < deadline, f"read {len(read)} of 100"
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            read.append((message.offset(), message.value()))
    assert read == [(i, f"record-{i}".encode()) for i in range(100)]
    # Keep fetching (at the log end) until the follower has served a good number of fetches.
    while _fetches(brokers[2], "consumer") < follower_before + 20:
        assert time.monotonic() < deadline, "the follower in the consumer's rack served too few fetches"
        consumer.poll(0.1)
    leader_fetches = _fetches(brokers[1], "consumer") - leader_before
    consumer.close()
    # The leader answered only the fetch that sent the consumer to its rack's follower.
    assert leader_fetches <= 2, leader_fetches
    assert _fetches(brokers[3], "consumer") == 0
    for broker in brokers.values():
        broker.stop()


def test_with_racks_mixed_create_topics_is_refused_and_auto_creation_ignores_racks(make_broker, chroot):
    settings = {"zookeeper.connect": chroot, "zookeeper.session.timeout.ms": "3000", "num.partitions": "2",
                "default.replication.factor": "2"}
    brokers = {1: make_broker({**settings, "broker.id": "1", "broker.rack": "az-a"}).start(),
               2: make_broker({**settings, "broker.id": "2"}).start()}
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    _until(lambda: len(_metadata(admin).brokers) == 2, "both brokers registered")
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("refused", 2, 2)])["refused"].result(WAIT_S)
    error = refused.value.args[0]
    assert error.code() == KafkaError.UNKNOWN and "rack information" in error.str()
    assert "refused" not in _metadata(admin).topics
    with RawClient(brokers[1].bootstrap) as raw:
        raw.request(METADATA, 9, {"topics": [{"name": "auto"}], "allow_auto_topic_creation": True,
                                  "include_cluster_authorized_operations": False,
                                  "include_topic_authorized_operations": False})
    _until(lambda: len(_metadata(admin, "auto").topics["auto"].partitions) == 2, "auto created")
    assert all(sorted(p.replicas) == [1, 2] for p in _metadata(admin, "auto").topics["auto"].partitions.values())
    for broker in brokers.values():
        broker.stop()
