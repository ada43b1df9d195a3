"""A broker's watched view: every change reaches the callback, in kazoo's thread, with an
immutable snapshot of brokers, controller and partition states (zk_version included)."""

from __future__ import annotations

import queue
import threading

from tests.zk.cluster_nodes import WAIT_S, Node, Observer
from tidemark.cluster.zk import topic_admin
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, ZkMetadataView
from tidemark.cluster.zk.session import connect


def test_the_view_follows_brokers_topics_and_leaders(chroot: str) -> None:
    changes: queue.Queue[tuple[str, ClusterSnapshot]] = queue.Queue()
    client = connect(chroot)
    view = ZkMetadataView(client, on_change=lambda s: changes.put((threading.current_thread().name, s)))
    view.start()
    observer = Observer(chroot)
    nodes = {b: Node(chroot, b) for b in (1, 2)}
    try:
        topic_admin.create_topic(nodes[1].client, "viewed", 1, 2, assignment={0: (1, 2)})
        observer.wait(lambda s: ("viewed", 0) in s.partitions and s.partitions["viewed", 0].state is not None, "led")

        def next_matching(predicate) -> tuple[str, ClusterSnapshot]:
            while True:
                thread, snapshot = changes.get(timeout=WAIT_S)
                if predicate(snapshot):
                    return thread, snapshot

        thread, snap = next_matching(lambda s: ("viewed", 0) in s.partitions and s.partitions["viewed", 0].state)
        assert thread != threading.main_thread().name  # kazoo's thread, as documented
        assert set(snap.brokers) == {1, 2} and snap.brokers[1].port == 9091 and snap.controller_id in (1, 2)
        p = snap.partitions["viewed", 0]
        assert (p.replicas, p.leader, p.leader_epoch, p.isr, p.zk_version) == ((1, 2), 1, 0, (1, 2), 0)

        survivor = 2
        nodes.pop(1).stop()
        _, snap = next_matching(lambda s: s.partitions["viewed", 0].leader == survivor)
        assert (snap.partitions["viewed", 0].leader_epoch, snap.partitions["viewed", 0].isr) == (1, (2,))
        assert set(snap.brokers) == {2} and snap.offline_replicas("viewed", 0) == (1,)
        assert [v.partition for v in snap.led_by(2)] == [0]
    finally:
        for node in nodes.values():
            node.stop()
        observer.close()
        view.close()
        client.stop()
        client.close()
