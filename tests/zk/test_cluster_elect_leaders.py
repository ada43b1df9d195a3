"""Preferred leader election on the cluster: /admin/preferred_replica_election with Kafka's JSON,
acted on by the controller (the preferred replica leads when it is alive and in the ISR, the
leader epoch goes up), and ElectLeaders through confluent-kafka's AdminClient on three broker
processes answering Kafka's per-partition errors. Every wait is on a watched change, bounded."""

from __future__ import annotations

import json
import threading

from confluent_kafka import Consumer, ElectionType, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.zk.cluster_nodes import WAIT_S, Node, Observer
from tests.zk.test_cluster_brokers import _bootstrap, _cluster, _metadata, _until
from tidemark.cluster.zk import topic_admin, zk_data
from tidemark.cluster.zk.isr import alter_isr
from tidemark.cluster.zk.preferred_election import request_preferred_election


def test_the_controller_elects_the_preferred_replica_only_when_alive_and_in_sync(
        chroot: str, observer: Observer, cluster: dict[int, Node]) -> None:
    controller = observer.view.snapshot.controller_id
    preferred, second, third = [b for b in (1, 2, 3) if b != controller] + [controller]
    topic_admin.create_topic(cluster[second].client, "elect", 1, 3, assignment={0: (preferred, second, third)})
    observer.wait(lambda s: s.partitions.get(("elect", 0)) and s.partitions["elect", 0].leader == preferred, "state")

    cluster.pop(preferred).stop()  # lost: the second replica leads, the preferred leaves the ISR
    observer.wait(lambda s: s.partitions["elect", 0].leader == second, "the second replica leads")
    cluster[preferred] = Node(chroot, preferred)  # back, alive but not in sync yet
    observer.wait(lambda s: preferred in s.brokers, "the preferred replica registered again")
    before = observer.view.snapshot.partitions["elect", 0].state

    assert request_preferred_election(cluster[second].client, [("elect", 0), ("absent", 0)], WAIT_S)
    data, stat = observer.client.get(zk_data.partition_state_path("elect", 0))
    assert zk_data.decode_partition_state(data, stat.version) == before  # not in the ISR: unchanged

    written = alter_isr(cluster[second].client, second, "elect", 0, before.leader_epoch, [second, third, preferred],
                        before.zk_version)
    assert request_preferred_election(cluster[third].client, [("elect", 0)], WAIT_S)
    data, stat = observer.client.get(zk_data.partition_state_path("elect", 0))
    after = zk_data.decode_partition_state(data)
    epoch = int(observer.client.get(zk_data.CONTROLLER_EPOCH)[0])
    assert (after.leader, after.leader_epoch, after.isr, after.controller_epoch, stat.version) == (
        preferred, written.leader_epoch + 1, (second, third, preferred), epoch, written.zk_version + 1)
    assert observer.client.exists(zk_data.PREFERRED_REPLICA_ELECTION) is None


def test_a_request_left_without_a_controller_is_handled_by_the_next_one(chroot: str, observer: Observer) -> None:
    node = Node(chroot, 1)
    topic_admin.create_topic(node.client, "pending", 1, 1, assignment={0: (1,)})
    observer.wait(lambda s: s.partitions.get(("pending", 0)) and s.partitions["pending", 0].state, "state")
    node.stop()
    observer.wait(lambda s: s.controller_id == -1, "no controller")
    # Kafka's JSON, as ZooKeeper-era tools write it.
    observer.client.create(zk_data.PREFERRED_REPLICA_ELECTION,
                           json.dumps({"version": 1, "partitions": [{"topic": "pending", "partition": 0}]}).encode())
    deleted = threading.Event()
    observer.client.DataWatch(zk_data.PREFERRED_REPLICA_ELECTION, lambda data, _stat: deleted.set() if data is None else None)
    node = Node(chroot, 1)
    try:
        assert deleted.wait(WAIT_S), "the new controller did not handle the pending request"
    finally:
        node.stop()


def _zk_state(zk, chroot: str, topic: str, partition: int = 0) -> dict:
    root = "/" + chroot.split("/", 1)[1]
    return json.loads(zk.get(f"{root}/brokers/topics/{topic}/partitions/{partition}/state")[0])


def _elect(admin: AdminClient, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
    results = admin.elect_leaders(ElectionType.PREFERRED, partitions).result(WAIT_S)
    return {(tp.topic, tp.partition): (error.code() if error is not None else ErrorCode.none)
            for tp, error in results.items()}


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot)
    admin = AdminClient({"bootstrap.servers": _bootstrap(brokers)})
    admin.create_topics([NewTopic("orders", 1, 3, config={"min.insync.replicas": "2"})])["orders"].result(WAIT_S)
    _until(lambda: len(_zk_state(zk, chroot, "orders")["isr"]) == 3, "three in-sync replicas")
    preferred = _metadata(admin, "orders").topics["orders"].partitions[0].replicas[0]
    assert _zk_state(zk, chroot, "orders")["leader"] == preferred
    assert _elect(admin, [TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("absent", 0)]) == {
        ("orders", 0): ErrorCode.election_not_needed, ("orders", 1): ErrorCode.unknown_topic_or_partition,
        ("absent", 0): ErrorCode.unknown_topic_or_partition}

    producer = Producer({"bootstrap.servers": _bootstrap(brokers), "acks": "all", "enable.idempotence": True})
    for i in range(50):
        producer.produce("orders", b"before-%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0

    # A restart of the preferred replica leaves the leadership with another broker.
    brokers[preferred].kill()
    _until(lambda: _zk_state(zk, chroot, "orders")["leader"] not in (preferred, -1), "another leader")
    brokers[preferred].start()
    _until(lambda: len(_zk_state(zk, chroot, "orders")["isr"]) == 3, "the restarted replica back in sync")
    before = _zk_state(zk, chroot, "orders")
    assert before["leader"] != preferred

    assert _elect(admin, [TopicPartition("orders", 0)]) == {("orders", 0): ErrorCode.none}
    after = _zk_state(zk, chroot, "orders")
    assert (after["leader"], after["leader_epoch"], sorted(after["isr"])) == (
        preferred, before["leader_epoch"] + 1, [1, 2, 3])
    assert after["controller_epoch"] == int(zk.get("/" + chroot.split("/", 1)[1] + "/controller_epoch")[0])
    for broker in brokers.values():  # every broker's Metadata shows the preferred leader
        one = AdminClient({"bootstrap.servers": broker.bootstrap})
        _until(lambda: _metadata(one, "orders").topics["orders"].partitions[0].leader == preferred,
               f"{broker.bootstrap} shows the preferred leader")

    for i in range(50):  # the new leader serves acks=all writes after the old ones
        producer.produce("orders", b"after-%d" % i, partition=0)
    assert producer.flush(WAIT_S) == 0
    consumer = Consumer({"bootstrap.servers": _bootstrap(brokers), "group.id": "reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition("orders", 0, 0)])
    values = []
    _until(lambda: values.extend(m.value() for m in consumer.consume(100, 0.5) if not m.error()) or len(values) >= 100,
           "every record read back")
    consumer.close()
    assert values == [b"before-%d" % i for i in range(50)] + [b"after-%d" % i for i in range(50)]

    # The preferred replica lost: PREFERRED_LEADER_NOT_AVAILABLE, leadership stays where it went.
    brokers[preferred].kill()
    _until(lambda: _zk_state(zk, chroot, "orders")["leader"] not in (preferred, -1), "a new leader")
    moved = _zk_state(zk, chroot, "orders")
    assert _elect(admin, [TopicPartition("orders", 0)]) == {("orders", 0): ErrorCode.preferred_leader_not_available}
    assert _zk_state(zk, chroot, "orders") == moved
