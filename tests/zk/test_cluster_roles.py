"""Applying view changes to local replicas (broker/cluster/roles.py): only the partitions a
change names are visited; a newly led offsets partition is loaded, the same leader at a higher
epoch only moves the shard's epoch; a lost session answers the acks=all waiters of led
partitions NOT_LEADER_OR_FOLLOWER."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from tidemark.broker.cluster.roles import ReplicaRoles
from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, PartitionView
from tidemark.replication.errors import NotLeaderOrFollowerError

OFFSETS = "__consumer_offsets"
NODE = 1


class FakePartition:
    def __init__(self, topic: str, index: int) -> None:
        self.topic, self.index = topic, index
        self.is_leader = False
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self.zk_version = -1
        self.isr: frozenset[int] = frozenset()
        self.calls: list[tuple[Any, ...]] = []
        self.failed: list[BaseException] = []

    def become_leader(self, epoch: int, replicas: tuple[int, ...], isr: frozenset[int], zk_version: int,
                      _now: int) -> bool:
        if epoch <= self.leader_epoch:
            return False  # as Partition: only a higher epoch is taken
        self.calls.append(("leader", epoch))
        self.is_leader, self.leader_id, self.leader_epoch, self.isr, self.zk_version = True, NODE, epoch, isr, zk_version
        return True

    def become_follower(self, leader: int | None, epoch: int, replicas: tuple[int, ...], isr: frozenset[int],
                        zk_version: int) -> bool:
        if epoch < self.leader_epoch:
            return False
        self.calls.append(("follower", epoch))
        self.is_leader, self.leader_id, self.leader_epoch, self.isr, self.zk_version = False, leader, epoch, isr, zk_version
        return True

    def update_isr(self, isr: frozenset[int], zk_version: int) -> None:
        self.isr, self.zk_version = isr, zk_version

    def fail_waiters(self, exc: BaseException) -> None:
        self.failed.append(exc)


class NoTopicChanges:
    def update(self, _topics: Any, _configs: Any) -> tuple[list[Any], list[str]]:
        return [], []


class FakeReplicas:
    def __init__(self, partitions: list[FakePartition]) -> None:
        self.partitions = {(p.topic, p.index): p for p in partitions}
        self.metadata = NoTopicChanges()
        self.lookups = 0

    def partition(self, topic: str, index: int) -> FakePartition | None:
        self.lookups += 1
        return self.partitions.get((topic, index))

    def schedule_flush(self, _partition: FakePartition) -> None:
        pass


class FakeCoordinator:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def partition_led(self, topic: str, index: int, epoch: int) -> None:
        self.calls.append(("led", index, epoch))

    def partition_leader_epoch(self, topic: str, index: int, epoch: int) -> None:
        self.calls.append(("epoch", index, epoch))

    def partition_followed(self, topic: str, index: int, epoch: int) -> None:
        self.calls.append(("followed", index, epoch))


class Config(dict):
    node_id = NODE


class Clock:
    def now_ms(self) -> int:
        return 0


def _snapshot(states: dict[tuple[str, int], tuple[int, int, tuple[int, ...], int]]) -> ClusterSnapshot:
    """(topic, partition) -> (leader, epoch, isr, zk_version)."""
    partitions = {key: PartitionView(key[0], key[1], (1, 2), zk_data.PartitionState(
        leader=leader, leader_epoch=epoch, isr=isr, controller_epoch=1, zk_version=version))
        for key, (leader, epoch, isr, version) in states.items()}
    return ClusterSnapshot(MappingProxyType({}), 1, MappingProxyType({}), MappingProxyType(partitions))


def _roles(partitions: list[FakePartition]) -> tuple[ReplicaRoles, FakeReplicas, FakeCoordinator]:
    replicas, coordinator = FakeReplicas(partitions), FakeCoordinator()
    return ReplicaRoles(Config(), replicas, coordinator, Clock(), lambda _b: None), replicas, coordinator


def test_a_change_visits_only_the_partitions_it_names() -> None:
    partitions = [FakePartition("wide", p) for p in range(1000)]
    roles, replicas, _ = _roles(partitions)
    states = {("wide", p): (NODE, 0, (1, 2), 0) for p in range(1000)}
    assert roles.apply(_snapshot(states), None, topics_changed=False) == 1000  # at start: all
    replicas.lookups = 0
    states["wide", 7] = (NODE, 0, (1,), 1)
    assert roles.apply(_snapshot(states), {("wide", 7)}, topics_changed=False) == 1
    assert replicas.lookups == 1
    assert partitions[7].isr == {1} and partitions[8].isr == {1, 2}


def test_the_same_leader_at_a_higher_epoch_keeps_the_offsets_shard() -> None:
    shard = FakePartition(OFFSETS, 0)
    roles, _, coordinator = _roles([shard])
    key = (OFFSETS, 0)
    roles.apply(_snapshot({key: (NODE, 0, (1, 2), 0)}), None, topics_changed=False)
    roles.apply(_snapshot({key: (NODE, 1, (1,), 1)}), {key}, topics_changed=False)  # the controller's ISR change
    assert shard.calls == [("leader", 0), ("leader", 1)]  # the partition serves the new epoch
    assert coordinator.calls == [("led", 0, 0), ("epoch", 0, 1)]  # loaded once, never again


def test_a_stale_view_changes_no_role() -> None:
    """A view older than what the partition took (a slow watch) neither moves its role nor
    tells the coordinator anything: leadership only moves to higher epochs."""
    shard = FakePartition(OFFSETS, 0)
    roles, _, coordinator = _roles([shard])
    key = (OFFSETS, 0)
    roles.apply(_snapshot({key: (NODE, 3, (1, 2), 0)}), None, topics_changed=False)
    roles.apply(_snapshot({key: (NODE, 2, (1, 2), 0)}), {key}, topics_changed=False)
    roles.apply(_snapshot({key: (-1, 2, (2,), 0)}), {key}, topics_changed=False)
    assert shard.calls == [("leader", 3)] and shard.is_leader and shard.leader_epoch == 3
    assert coordinator.calls == [("led", 0, 3)]


def test_a_lost_session_answers_the_waiters_of_led_partitions() -> None:
    led, followed = FakePartition("t", 0), FakePartition("t", 1)
    roles, _, _ = _roles([led, followed])
    roles.apply(_snapshot({("t", 0): (NODE, 0, (1, 2), 0), ("t", 1): (-1, 0, (2,), 0)}), None, topics_changed=False)
    roles.session_lost()
    assert [type(exc) for exc in led.failed] == [NotLeaderOrFollowerError]
    assert followed.failed == []


def test_a_leadership_written_before_this_registration_is_not_taken() -> None:
    """A broker restarted (after a power loss its log may lack what it acknowledged before)
    takes a leadership only from a state written after its current registration (the state's
    mzxid above the registration's czxid, Kafka's broker epoch): an older one is the controller's
    decision from before it saw the restart, and the controller writes a new one."""
    partition = FakePartition("t", 0)
    replicas, coordinator = FakeReplicas([partition]), FakeCoordinator()
    roles = ReplicaRoles(Config(), replicas, coordinator, Clock(), lambda _b: None, registration_czxid=lambda: 100)
    key = ("t", 0)

    def snapshot(epoch: int, version: int, mzxid: int) -> ClusterSnapshot:
        state = zk_data.PartitionState(leader=NODE, leader_epoch=epoch, isr=(1, 2), controller_epoch=1,
                                       zk_version=version, mzxid=mzxid)
        return ClusterSnapshot(MappingProxyType({}), 1, MappingProxyType({}),
                               MappingProxyType({key: PartitionView("t", 0, (1, 2), state)}))
    roles.apply(snapshot(4, 7, 90), None, topics_changed=False)
    assert partition.calls == [] and not partition.is_leader and coordinator.calls == []
    roles.apply(snapshot(6, 9, 120), {key}, topics_changed=False)  # the controller's new state
    assert partition.calls == [("leader", 6)] and coordinator.calls == [("led", 0, 6)]
