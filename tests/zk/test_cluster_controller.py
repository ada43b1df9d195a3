"""The ZooKeeper side of a cluster against a real ZooKeeper: registration, controller election
and fencing, leader election from the ISR on broker loss, offline partitions and their recovery,
topic administration, conditional ISR writes, controlled shutdown. Every wait is on a watched
change, bounded."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from tests.zk.cluster_nodes import Node, Observer, expire_session
from tidemark.cluster.zk import topic_admin, zk_data
from tidemark.cluster.zk.assignment import assign_replicas_to_brokers
from tidemark.cluster.zk.errors import (
    BrokerIdInUseError,
    ControllerMovedError,
    FencedLeaderEpochError,
    InvalidReplicationFactorError,
    NotLeaderError,
    StaleZkVersionError,
    TopicExistsError,
)
from tidemark.cluster.zk.isr import alter_isr
from tidemark.cluster.zk.registration import BrokerRegistration
from tidemark.cluster.zk.session import connect
from tidemark.cluster.zk.shutdown import request_controlled_shutdown


def state(observer: Observer, topic: str, partition: int) -> zk_data.PartitionState | None:
    return observer.view.snapshot.partitions[topic, partition].state if (topic, partition) in observer.view.snapshot.partitions else None


def create(observer: Observer, client: KazooClient, topic: str, assignment: dict[int, tuple[int, ...]]) -> None:
    topic_admin.create_topic(client, topic, len(assignment), len(assignment[0]), assignment=assignment)
    observer.wait(lambda s: all((topic, p) in s.partitions and s.partitions[topic, p].state for p in assignment),
                  f"states of {topic}")


# -- registration ---------------------------------------------------------------------------


def test_registration_is_ephemeral_kafka_json_and_refuses_a_taken_id(chroot: str, observer: Observer) -> None:
    node = Node(chroot, 1, port=19092)
    try:
        data, stat = observer.client.get("/brokers/ids/1")
        assert stat.ephemeralOwner == node.client.client_id[0]
        registered = json.loads(data)
        assert registered["endpoints"] == ["PLAINTEXT://127.0.0.1:19092"] and registered["version"] == 5
        assert observer.wait(lambda s: 1 in s.brokers, "broker 1").brokers[1].port == 19092

        other = connect(chroot)
        try:
            with pytest.raises(BrokerIdInUseError, match=r"Error while creating ephemeral at /brokers/ids/1, node already "
                                                         r"exists and owner '\d+' does not match current session '\d+'"):
                BrokerRegistration(other, zk_data.BrokerInfo(1, "127.0.0.1", 19093)).register()
        finally:
            other.stop()
            other.close()
        assert json.loads(observer.client.get("/brokers/ids/1")[0])["port"] == 19092
    finally:
        node.stop()
    observer.wait(lambda s: 1 not in s.brokers, "broker 1 gone with its session")


def test_registration_comes_back_after_a_session_expiry(chroot: str, observer: Observer) -> None:
    node = Node(chroot, 4)
    try:
        first = observer.client.exists("/brokers/ids/4").czxid
        expire_session(chroot, node.client)
        observer.wait(lambda s: 4 in s.brokers and observer.client.exists("/brokers/ids/4")
                      and observer.client.exists("/brokers/ids/4").czxid != first, "broker 4 registered again")
        assert observer.client.exists("/brokers/ids/4").ephemeralOwner == node.client.client_id[0]
    finally:
        node.stop()


# -- election and fencing ---------------------------------------------------------------------


def test_one_controller_and_a_new_one_when_its_session_ends(chroot: str, observer: Observer, cluster) -> None:
    first = observer.view.snapshot.controller_id
    epoch = int(observer.client.get("/controller_epoch")[0])
    assert [n.controller.is_active for n in cluster.values()].count(True) == 1
    assert cluster[first].controller.epoch == epoch
    cluster[first].stop()
    second = observer.wait(lambda s: s.controller_id not in (-1, first), "a new controller").controller_id
    assert int(observer.client.get("/controller_epoch")[0]) == epoch + 1
    assert json.loads(observer.client.get("/controller")[0])["brokerid"] == second
    del cluster[first]


def test_a_deposed_controller_writes_nothing(chroot: str, observer: Observer, cluster) -> None:
    create(observer, cluster[1].client, "fenced", {0: (1, 2, 3)})
    first = cluster[observer.view.snapshot.controller_id]
    stale_fence = first.controller.fence
    expire_session(chroot, first.client)  # paused past its session: the others elect a new one
    observer.wait(lambda s: s.controller_id not in (-1, first.broker_id), "a new controller")
    with pytest.raises(ControllerMovedError):  # in its expired session
        stale_fence.commit(lambda t: t.set_data(zk_data.partition_state_path("fenced", 0), b"{}"))
    # Resumed in a new session, it still believes it leads: the epoch check refuses it.
    assert first.registration.registered.wait(30)
    path = zk_data.partition_state_path("fenced", 0)
    before = zk_data.decode_partition_state(*_data_and_version(observer.client, path))
    hijack = zk_data.PartitionState(leader=first.broker_id, leader_epoch=99, isr=(first.broker_id,), controller_epoch=1)
    with pytest.raises(ControllerMovedError):
        stale_fence.commit(lambda t: t.set_data(path, zk_data.encode_partition_state(hijack)))
    assert zk_data.decode_partition_state(*_data_and_version(observer.client, path)) == before
    with pytest.raises(ControllerMovedError):
        first.controller.shutdown_broker(2)


def _data_and_version(client: KazooClient, path: str) -> tuple[bytes, int]:
    data, stat = client.get(path)
    return data, stat.version


# -- leader election --------------------------------------------------------------------------


def non_controller(observer: Observer, cluster: dict[int, Node]) -> int:
    return next(b for b in sorted(cluster) if b != observer.view.snapshot.controller_id)


def test_a_lost_leader_is_replaced_from_the_isr_only(observer: Observer, cluster) -> None:
    lost = non_controller(observer, cluster)
    others = [b for b in sorted(cluster) if b != lost]
    # Partition 0: the replica after the leader in assignment order is out of the ISR, so the
    # one after it must win. Partition 1: led by another broker, only its ISR shrinks.
    create(observer, cluster[lost].client, "elect", {0: (lost, others[0], others[1]), 1: (others[0], lost, others[1])})
    leader_state = state(observer, "elect", 0)
    alter_isr(cluster[lost].client, lost, "elect", 0, 0, [lost, others[1]], leader_state.zk_version)
    observer.wait(lambda s: s.partitions["elect", 0].isr == (lost, others[1]), "ISR shrunk by the leader")

    cluster.pop(lost).stop()
    snap = observer.wait(lambda s: s.partitions["elect", 0].leader not in (lost,) and s.partitions["elect", 1].isr == (others[0], others[1]),
                         "new leader for partition 0")
    p0, p1 = snap.partitions["elect", 0], snap.partitions["elect", 1]
    assert (p0.leader, p0.leader_epoch, p0.isr) == (others[1], 1, (others[1],))
    assert (p1.leader, p1.leader_epoch, p1.isr) == (others[0], 1, (others[0], others[1]))
    assert p0.state.controller_epoch == int(observer.client.get("/controller_epoch")[0])
    assert snap.offline_replicas("elect", 0) == (lost,)


def test_offline_without_a_live_isr_member_and_back_when_it_returns(chroot: str, observer: Observer, cluster) -> None:
    lost = non_controller(observer, cluster)
    other = next(b for b in sorted(cluster) if b != lost)
    create(observer, cluster[lost].client, "offline", {0: (lost, other)})
    alter_isr(cluster[lost].client, lost, "offline", 0, 0, [lost], state(observer, "offline", 0).zk_version)
    observer.wait(lambda s: s.partitions["offline", 0].isr == (lost,), "ISR of the leader alone")

    cluster.pop(lost).stop()
    p = observer.wait(lambda s: s.partitions["offline", 0].leader_epoch == 1, "partition offline").partitions["offline", 0]
    # `other` is alive but out of sync: never elected (unclean.leader.election.enable=false).
    assert (p.leader, p.isr) == (zk_data.NO_LEADER, (lost,))

    cluster[lost] = Node(chroot, lost)
    p = observer.wait(lambda s: s.partitions["offline", 0].leader == lost, "leader back").partitions["offline", 0]
    assert (p.leader_epoch, p.isr) == (2, (lost,))


# -- topics -----------------------------------------------------------------------------------


def test_create_topic_assigns_as_kafka_and_initialises_states(observer: Observer, cluster) -> None:
    client = cluster[1].client
    created = topic_admin.create_topic(client, "orders", 6, 2, {"min.insync.replicas": "2"}, start_index=2)
    assert dict(created.partitions) == assign_replicas_to_brokers([1, 2, 3], 6, 2, start_index=2)
    assert json.loads(observer.client.get("/config/topics/orders")[0]) == {"version": 1, "config": {"min.insync.replicas": "2"}}
    snap = observer.wait(lambda s: all(s.partitions["orders", p].state for p in range(6)) if ("orders", 5) in s.partitions else False,
                         "states of orders")
    for p, replicas in created.partitions.items():
        view = snap.partitions["orders", p]
        assert (view.leader, view.leader_epoch, view.isr, view.replicas) == (replicas[0], 0, replicas, replicas)
    with pytest.raises(InvalidReplicationFactorError, match="Replication factor: 4 larger than available brokers: 3."):
        topic_admin.create_topic(client, "too-wide", 1, 4)
    with pytest.raises(TopicExistsError):
        topic_admin.create_topic(client, "orders", 1, 1)
    assert observer.client.exists("/brokers/topics/too-wide") is None

    grown = topic_admin.add_partitions(client, "orders", 8)
    # Kafka's CreatePartitions: the round robin restarts at partition 0's leader (broker 3, index 2).
    assert dict(grown.partitions) == {**created.partitions, **assign_replicas_to_brokers(
        [1, 2, 3], 2, 2, start_index=2, start_partition_id=6)}
    observer.wait(lambda s: ("orders", 7) in s.partitions and s.partitions["orders", 7].state is not None, "new partitions led")

    topic_admin.delete_topic(client, "orders")
    observer.wait(lambda s: "orders" not in s.topics, "orders deleted")
    for path in ("/brokers/topics/orders", "/config/topics/orders", "/admin/delete_topics/orders"):
        assert observer.client.exists(path) is None


def test_isr_writes_are_conditional_on_the_zk_version(observer: Observer, cluster) -> None:
    create(observer, cluster[1].client, "isr", {0: (1, 2, 3)})
    current = state(observer, "isr", 0)
    written = alter_isr(cluster[1].client, 1, "isr", 0, 0, [1, 2], current.zk_version)
    assert written.zk_version == current.zk_version + 1
    with pytest.raises(StaleZkVersionError):
        alter_isr(cluster[1].client, 1, "isr", 0, 0, [1, 2, 3], current.zk_version)
    with pytest.raises(NotLeaderError):
        alter_isr(cluster[2].client, 2, "isr", 0, 0, [2], written.zk_version)
    with pytest.raises(FencedLeaderEpochError):
        alter_isr(cluster[1].client, 1, "isr", 0, 5, [1], written.zk_version)
    data, stat = observer.client.get(zk_data.partition_state_path("isr", 0))
    assert (zk_data.decode_partition_state(data).isr, stat.version) == ((1, 2), written.zk_version)
    # The controller consumes the ISR change notices.
    observer.wait(lambda s: not observer.client.get_children("/isr_change_notification"), "notices consumed")


# -- controlled shutdown ----------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_away(observer: Observer, cluster) -> None:
    leaving = non_controller(observer, cluster)
    others = [b for b in sorted(cluster) if b != leaving]
    create(observer, cluster[leaving].client, "moving", {0: (leaving, others[0], others[1]), 1: (others[1], leaving, others[0]),
                                                         2: (leaving, others[0])})
    alter_isr(cluster[leaving].client, leaving, "moving", 2, 0, [leaving], state(observer, "moving", 2).zk_version)
    observer.wait(lambda s: s.partitions["moving", 2].isr == (leaving,), "partition 2 in sync on one broker")

    assert request_controlled_shutdown(cluster[leaving].client, leaving, 30)
    # The observer's view follows ZooKeeper's watches: wait until it shows both moves.
    observer.wait(lambda s: all(s.partitions["moving", p].leader_epoch == 1 for p in (0, 1)), "both moves seen")
    snap = observer.view.snapshot
    p0, p1, p2 = (snap.partitions["moving", p] for p in range(3))
    assert (p0.leader, p0.leader_epoch, p0.isr) == (others[0], 1, (others[0], others[1]))
    assert (p1.leader, p1.leader_epoch, p1.isr) == (others[1], 1, (others[1], others[0]))
    assert (p2.leader, p2.isr) == (leaving, (leaving,))  # its only in-sync replica: stays
    assert observer.client.exists(zk_data.controlled_shutdown_path(leaving)) is None


# -- ZooKeeper-era tools ----------------------------------------------------------------------


def test_kafka_era_tools_read_the_layout(observer: Observer, cluster) -> None:
    """What kafka-topics.sh --zookeeper --describe reads: topic ids under /brokers/topics, the
    assignment, each partition's state, the broker ids."""
    topic_admin.create_topic(cluster[1].client, "tools", 2, 3)
    observer.wait(lambda s: ("tools", 1) in s.partitions and s.partitions["tools", 1].state is not None, "tools led")
    zk = observer.client
    assert sorted(int(b) for b in zk.get_children("/brokers/ids")) == [1, 2, 3]
    for b in (1, 2, 3):
        assert {"host", "port", "endpoints", "jmx_port", "timestamp", "version"} <= json.loads(zk.get(f"/brokers/ids/{b}")[0]).keys()
    topic = json.loads(zk.get("/brokers/topics/tools")[0])
    assert topic["version"] == 3 and sorted(topic["partitions"]) == ["0", "1"] and len(topic["topic_id"]) == 22
    for p, replicas in topic["partitions"].items():
        st = json.loads(zk.get(f"/brokers/topics/tools/partitions/{p}/state")[0])
        assert st.keys() == {"controller_epoch", "leader", "version", "leader_epoch", "isr"}
        assert st["leader"] == replicas[0] and sorted(st["isr"]) == sorted(replicas)
    controller = json.loads(zk.get("/controller")[0])
    assert controller.keys() == {"version", "brokerid", "timestamp"} and isinstance(controller["timestamp"], str)
    assert zk.get("/controller_epoch")[0].isdigit()


def test_a_restarted_broker_waits_for_its_previous_sessions_znode_to_go(chroot: str, observer: Observer) -> None:
    """A broker back before its previous session expired (a crash, a stop that could not close
    its session) registers once that session's znode goes, instead of refusing to start."""
    previous = connect(chroot)
    BrokerRegistration(previous, zk_data.BrokerInfo(7, "127.0.0.1", 19097)).register()
    restarted = connect(chroot)
    try:
        def end_previous_session_once_waited_for() -> None:
            # kazoo's record of the watch `register` sets on the znode it waits for
            deadline = time.monotonic() + 60
            while not any(path.endswith("/brokers/ids/7") for path in restarted._data_watchers):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            previous.stop()  # its session ends: the znode goes
            previous.close()

        ending = threading.Thread(target=end_previous_session_once_waited_for)
        ending.start()
        registration = BrokerRegistration(restarted, zk_data.BrokerInfo(7, "127.0.0.1", 19098), wait_for_owner_s=60)
        registration.register()
        ending.join(60)
        data, stat = observer.client.get("/brokers/ids/7")
        assert json.loads(data)["port"] == 19098 and stat.ephemeralOwner == restarted.client_id[0]
    finally:
        restarted.stop()
        restarted.close()
