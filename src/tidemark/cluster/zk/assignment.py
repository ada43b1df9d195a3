"""Kafka's replica assignment (AdminUtils.assignReplicasToBrokers), rack-unaware and rack-aware.

Rack-unaware: partition p's first replica is broker (p + start) mod n; the followers are spread by
a shift that grows by one every n partitions, so leaders and followers both go round-robin and no
two partitions of a topic put the same pair of brokers in the same order more than needed.
`start_index`/`replica_shift` are random in Kafka (and here) unless fixed.

Rack-aware (KIP-36, when every broker has a rack): the same round robin over the brokers
alternated by rack (rack a's first broker, rack b's first, ..., rack a's second, ...), and a
follower is skipped while it would put a second replica in a rack when some rack has none, or a
second replica on a broker when some broker has none. Brokers with and without racks mixed are
refused unless rack-unaware assignment is asked for (Kafka's RackAwareMode).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence

from tidemark.cluster.zk.errors import InvalidPartitionsError, InvalidReplicationFactorError, RackInformationError


class RackAwareMode(enum.Enum):
    """How racks are taken (Kafka's RackAwareMode): ENFORCED refuses brokers with and without
    racks mixed; SAFE then assigns rack-unaware; DISABLED always does."""

    ENFORCED = "enforced"
    SAFE = "safe"
    DISABLED = "disabled"


def broker_racks(racks: Mapping[int, str | None], mode: RackAwareMode) -> dict[int, str | None]:
    """The racks assignment goes by (AdminZkClient.getBrokerMetadatas): all None when racks are
    ignored."""
    with_rack = sum(1 for rack in racks.values() if rack is not None)
    if mode is RackAwareMode.ENFORCED and 0 < with_rack < len(racks):
        raise RackInformationError("Not all brokers have rack information. Add --disable-rack-aware in command "
                                   "line to make replica assignment without rack information.")
    if mode is RackAwareMode.DISABLED or with_rack < len(racks):
        return {broker: None for broker in racks}
    return dict(racks)


def assign_replicas_to_brokers(broker_ids: Sequence[int], partitions: int, replication_factor: int,
                               start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None,
                               racks: Mapping[int, str | None] | None = None) -> dict[int, tuple[int, ...]]:
    """`racks`: each broker's rack (as `broker_racks` gives them); rack-aware when any is set."""
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    brokers = sorted(broker_ids)
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    rng = rng or random.Random()
    if racks and any(racks.get(b) is not None for b in brokers):
        if any(racks.get(b) is None for b in brokers):
            raise RackInformationError("Not all brokers have rack information for replica rack aware assignment.")
        return _assign_rack_aware(brokers, {b: racks[b] for b in brokers}, partitions, replication_factor,
                                  start_index, start_partition_id, rng)
    n = len(brokers)
    first_start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    assignment: dict[int, tuple[int, ...]] = {}
    partition_id = max(0, start_partition_id)
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + first_start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n])
        assignment[partition_id] = tuple(replicas)
        partition_id += 1
    return assignment


def _assign_rack_aware(brokers: list[int], racks: dict[int, str], partitions: int, replication_factor: int,
                       start_index: int, start_partition_id: int, rng: random.Random) -> dict[int, tuple[int, ...]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    rack_count = len(set(racks.values()))
    first_start = start_index if start_index >= 0 else rng.randrange(n)
    shift = start_index if start_index >= 0 else rng.randrange(n)
    assignment: dict[int, tuple[int, ...]] = {}
    partition_id = max(0, start_partition_id)
    for _ in range(partitions):
        if partition_id > 0 and partition_id % n == 0:
            shift += 1
        first = (partition_id + first_start) % n
        replicas = [arranged[first]]
        racks_used, brokers_used = {racks[arranged[first]]}, {arranged[first]}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                # Kafka's replicaIndex with the shift scaled by the rack count, so consecutive
                # followers land in other racks of the alternated list.
                broker = arranged[(first + 1 + (shift * rack_count + k) % (n - 1)) % n]
                k += 1
                rack = racks[broker]
                if (rack not in racks_used or len(racks_used) == rack_count) and \
                        (broker not in brokers_used or len(brokers_used) == n):
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        assignment[partition_id] = tuple(replicas)
        partition_id += 1
    return assignment


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """The brokers alternated by rack: racks in name order, each rack's brokers by id
    (rack1: 0,1,2; rack2: 3,4,5 give 0,3,1,4,2,5)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    return [column[i] for i in range(max(map(len, columns))) for column in columns if i < len(column)]


def start_index_for_new_partitions(broker_ids: Sequence[int], partition_zero_replicas: Sequence[int]) -> int:
    """Where CreatePartitions continues Kafka's round robin: at the first broker whose id is at
    least partition 0's preferred leader (AdminZkClient.createNewPartitionsAssignment)."""
    brokers = sorted(broker_ids)
    for index, broker in enumerate(brokers):
        if broker >= partition_zero_replicas[0]:
            return index
    return 0
