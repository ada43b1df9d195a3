"""The view reports which partitions changed since they were last taken, so a broker applying
a change visits those only: one partition's ISR write among 200 partitions is one partition
changed; a deleted topic is each of its partitions changed."""

from __future__ import annotations

from tests.zk.cluster_nodes import Node, Observer
from tidemark.cluster.zk import topic_admin
from tidemark.cluster.zk.isr import alter_isr

PARTITIONS = 200


def test_a_change_names_only_the_partitions_it_changed(observer: Observer, cluster: dict[int, Node]) -> None:
    view = observer.view
    view.take_changes()  # whatever came before the topic
    topic_admin.create_topic(cluster[1].client, "wide", PARTITIONS, 2,
                             assignment={p: (1, 2) for p in range(PARTITIONS)})
    snapshot = observer.wait(lambda s: all((v := s.partitions.get(("wide", p))) is not None and v.state is not None
                                           for p in range(PARTITIONS)), "every partition's state")
    created = view.take_changes()
    assert created.topics_changed
    assert {("wide", p) for p in range(PARTITIONS)} <= created.partitions
    assert view.take_changes().partitions == frozenset()  # taken: nothing left

    state = snapshot.partitions["wide", 7].state
    alter_isr(cluster[1].client, 1, "wide", 7, state.leader_epoch, [1], state.zk_version)
    observer.wait(lambda s: s.partitions["wide", 7].isr == (1,), "the ISR write seen")
    changed = view.take_changes()
    assert (changed.partitions, changed.topics_changed) == (frozenset({("wide", 7)}), False)
    assert changed.snapshot.partitions["wide", 7].zk_version == state.zk_version + 1

    topic_admin.delete_topic(cluster[2].client, "wide")
    observer.wait(lambda s: "wide" not in s.topics, "the topic deleted")
    deleted = view.take_changes()
    assert deleted.topics_changed
    assert {("wide", p) for p in range(PARTITIONS)} <= deleted.partitions
    assert not any(key[0] == "wide" for key in deleted.snapshot.partitions)
