"""The controller's leader and ISR decisions, as pure functions of (replicas, state, live brokers).

Kafka's rules with unclean.leader.election.enable=false: a leader is only ever chosen from the
ISR, the first such replica in assignment order (so the preferred replica wins when it can); any
leader or ISR change the controller makes bumps the leader epoch. When no ISR member is alive
the partition goes offline (leader -1) and its ISR keeps its last member, so that member is the
one that becomes leader again when it comes back (Kafka's OfflineReplica transition).
Each function answers the new state, or None when nothing changes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from tidemark.cluster.zk.zk_data import NO_LEADER, PartitionState


def _changed(old: PartitionState, leader: int, isr: Sequence[int], controller_epoch: int) -> PartitionState | None:
    if leader == old.leader and tuple(isr) == old.isr:
        return None
    return PartitionState(leader=leader, leader_epoch=old.leader_epoch + 1, isr=tuple(isr),
                          controller_epoch=controller_epoch, zk_version=old.zk_version)


def initial_state(replicas: Sequence[int], live: Collection[int], controller_epoch: int) -> PartitionState | None:
    """A new partition: the first live replica leads, every live replica is in sync (its log is
    empty). None while no replica is alive (Kafka keeps it a NewPartition until one is)."""
    in_sync = [r for r in replicas if r in live]
    if not in_sync:
        return None
    return PartitionState(leader=in_sync[0], leader_epoch=0, isr=tuple(in_sync), controller_epoch=controller_epoch)


def registered_since(state: PartitionState, registrations: Mapping[int, int]) -> set[int]:
    """The leader and ISR members of `state` registered after it was written (their
    registration's czxid, Kafka's broker epoch of KIP-380, above the state's mzxid): each
    restarted or lost its session since, so what the state says of it is from before."""
    if state.mzxid < 0:
        return set()
    named = set(state.isr) | ({state.leader} if state.leader != NO_LEADER else set())
    return {b for b in named if registrations.get(b, -1) > state.mzxid}


def elect_after_change(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                       controller_epoch: int, not_leader: Collection[int] = (),
                       registrations: Mapping[int, int] | None = None) -> PartitionState | None:
    """After brokers were lost or came back: dead brokers leave the ISR; a partition without a
    live leader gets the first live ISR member in assignment order (brokers in controlled
    shutdown, `not_leader`, excepted), or goes offline. With `registrations` (live broker ->
    czxid), a broker registered since `state` was written is handled as a failure, then a
    startup (Kafka's controller on a bounced broker epoch): it leaves the ISR, and its
    leadership moves to another live ISR member or, if it was the only one, is given again at a
    new epoch, a state written after its registration (the only kind it takes, see roles.py)."""
    bounced = registered_since(state, registrations) & set(live) if registrations else set()
    if bounced:
        failed = elect_after_change(replicas, state, set(live) - bounced, controller_epoch, not_leader)
        return elect_after_change(replicas, failed or state, live, controller_epoch, not_leader) or failed
    live_isr = [r for r in state.isr if r in live]
    if state.leader != NO_LEADER and state.leader in live:
        return _changed(state, state.leader, live_isr, controller_epoch)
    for replica in replicas:
        if replica in live_isr and replica not in not_leader:
            return _changed(state, replica, live_isr, controller_epoch)
    # Offline. The ISR keeps one member, the last leader when it was in sync: the replica with
    # every acknowledged record, the only one a clean election may pick when it returns.
    last = [state.leader] if state.leader in state.isr else list(state.isr[:1])
    return _changed(state, NO_LEADER, live_isr or last, controller_epoch)


def elect_for_controlled_shutdown(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                                  shutting_down: Collection[int], controller_epoch: int) -> PartitionState | None:
    """Kafka's ControlledShutdownPartitionLeaderElection and the follower's OfflineReplica step:
    leadership moves to the first live ISR member not shutting down, shutting-down brokers leave
    the ISR. A partition whose only in-sync replica is shutting down keeps its leader (None)."""
    remaining_isr = [r for r in state.isr if r not in shutting_down]
    if state.leader in shutting_down:
        for replica in replicas:
            if replica in remaining_isr and replica in live:
                return _changed(state, replica, remaining_isr, controller_epoch)
        return None
    if not remaining_isr:
        return None
    return _changed(state, state.leader, remaining_isr, controller_epoch)


def elect_preferred(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                    controller_epoch: int, not_leader: Collection[int] = ()) -> PartitionState | None:
    """Kafka's PreferredReplicaPartitionLeaderElection: the first replica of the assignment
    leads, if it is alive (and not shutting down) and in the ISR; the ISR stays as it is."""
    preferred = replicas[0]
    if preferred == state.leader or preferred not in live or preferred in not_leader or preferred not in state.isr:
        return None
    return _changed(state, preferred, state.isr, controller_epoch)
