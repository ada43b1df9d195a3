"""Which replica a consumer should read from (KIP-392, Kafka's ReplicaSelector).

The leader answers a consumer's fetch (Fetch v11+, which carries the client's rack) with a
preferred read replica when `replica.selector.class` picks one other than itself; the response
then carries no records, and the consumer fetches from that replica. Kafka's
ReplicaManager.findPreferredReadReplica offers the selector only the leader and the in-sync
followers that hold the fetch offset (their log start at or below it, their log end at or above
it): a lagging follower would keep the consumer behind the producer.
RackAwareReplicaSelector: no client rack, or none of those replicas in it, or the leader in it:
the leader; otherwise the most caught-up replica in the client's rack (largest log end, then the
shortest time since it was last caught up). LeaderSelector always keeps the leader.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from tidemark.replication.partition import Partition

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
NO_PREFERRED_REPLICA = -1  # Fetch's preferred_read_replica: read from the leader


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def rack_aware_select(client_rack: str | None, replicas: list[ReplicaView], leader: ReplicaView) -> ReplicaView:
    if not client_rack:
        return leader
    same_rack = [replica for replica in replicas if replica.rack == client_rack]
    if not same_rack or leader in same_rack:
        return leader
    return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_caught_up_ms))


def preferred_read_replica(selector: str | None, partition: Partition, client_rack: str | None, fetch_offset: int,
                           racks: Mapping[int, str | None], now_ms: int) -> int:
    """The replica this leader tells a consumer to read `partition` from at `fetch_offset`, or
    NO_PREFERRED_REPLICA (read here)."""
    if selector != RACK_AWARE or not client_rack or not partition.is_leader:
        return NO_PREFERRED_REPLICA
    leader = ReplicaView(partition.local_id, racks.get(partition.local_id), partition.log.log_end_offset, 0)
    candidates = [leader]
    for replica, state in partition.followers.items():
        if replica in partition.isr and replica in racks and \
                state.log_start_offset <= fetch_offset <= state.log_end_offset:
            candidates.append(ReplicaView(replica, racks[replica], state.log_end_offset,
                                          now_ms - state.last_caught_up_ms))
    selected = rack_aware_select(client_rack, candidates, leader)
    return NO_PREFERRED_REPLICA if selected is leader else selected.broker_id
