"""The controller's decision for a broker registered since a partition's state was written
(a restart or a new session it may not have seen: a failover, or a bounce between two looks):
Kafka's controller handles a new broker epoch as a failure, then a startup (KIP-380)."""

from __future__ import annotations

from tidemark.cluster.zk import leader_election
from tidemark.cluster.zk.zk_data import NO_LEADER, PartitionState

REPLICAS = (1, 2, 3)


def _state(leader: int, isr: tuple[int, ...], mzxid: int = 50) -> PartitionState:
    return PartitionState(leader=leader, leader_epoch=4, isr=isr, controller_epoch=1, zk_version=9, mzxid=mzxid)


def test_a_leader_registered_since_the_state_loses_its_leadership_to_a_live_isr_member() -> None:
    state = _state(1, (1, 2, 3))
    new = leader_election.elect_after_change(REPLICAS, state, {1, 2, 3}, 2, registrations={1: 60, 2: 10, 3: 20})
    assert (new.leader, new.isr, new.leader_epoch) == (2, (2, 3), 5)
    # Without the registrations (or with none newer than the state) nothing changes.
    assert leader_election.elect_after_change(REPLICAS, state, {1, 2, 3}, 2) is None
    assert leader_election.elect_after_change(REPLICAS, state, {1, 2, 3}, 2,
                                              registrations={1: 40, 2: 10, 3: 20}) is None


def test_a_sole_in_sync_leader_registered_since_is_given_its_leadership_again_at_a_new_epoch() -> None:
    """The only in-sync replica leads again (no clean choice), but in a state written after its
    registration, the only kind it takes."""
    state = _state(1, (1,))
    new = leader_election.elect_after_change(REPLICAS, state, {1, 2, 3}, 2, registrations={1: 60, 2: 10, 3: 20})
    assert (new.leader, new.isr) == (1, (1,)) and new.leader_epoch > state.leader_epoch


def test_a_follower_registered_since_leaves_the_isr() -> None:
    state = _state(2, (1, 2, 3))
    new = leader_election.elect_after_change(REPLICAS, state, {1, 2, 3}, 2, registrations={1: 60, 2: 10, 3: 20})
    assert (new.leader, new.isr) == (2, (2, 3))
    assert leader_election.registered_since(state, {1: 60, 2: 10, 3: 20}) == {1}


def test_a_state_not_read_from_zookeeper_names_nobody_as_registered_since() -> None:
    state = PartitionState(leader=NO_LEADER, leader_epoch=4, isr=(1,), controller_epoch=1)
    assert leader_election.registered_since(state, {1: 60}) == set()
