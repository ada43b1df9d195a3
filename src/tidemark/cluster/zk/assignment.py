"""Kafka's rack-unaware replica assignment (AdminUtils.assignReplicasToBrokers).

Partition p's first replica is broker (p + start) mod n; the followers are spread by a shift that
grows by one every n partitions, so leaders and followers both go round-robin and no two
partitions of a topic put the same pair of brokers in the same order more than needed.
`start_index`/`replica_shift` are random in Kafka (and here) unless fixed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from tidemark.cluster.zk.errors import InvalidPartitionsError, InvalidReplicationFactorError


def assign_replicas_to_brokers(broker_ids: Sequence[int], partitions: int, replication_factor: int,
                               start_index: int = -1, start_partition_id: int = -1,
                               rng: random.Random | None = None) -> dict[int, tuple[int, ...]]:
    if partitions <= 0:
        raise InvalidPartitionsError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
    brokers = sorted(broker_ids)
    if replication_factor > len(brokers):
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    n = len(brokers)
    rng = rng or random.Random()
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


def start_index_for_new_partitions(broker_ids: Sequence[int], partition_zero_replicas: Sequence[int]) -> int:
    """Where CreatePartitions continues Kafka's round robin: at the first broker whose id is at
    least partition 0's preferred leader (AdminZkClient.createNewPartitionsAssignment)."""
    brokers = sorted(broker_ids)
    for index, broker in enumerate(brokers):
        if broker >= partition_zero_replicas[0]:
            return index
    return 0
