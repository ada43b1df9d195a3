"""What a partition leader writes itself (ZooKeeper-era Kafka's Partition.shrinkIsr/expandIsr):
its ISR, conditional on the state znode's zk_version, then an ISR change notice for the
controller. The leader epoch is not bumped (only the controller bumps it)."""

from __future__ import annotations

from collections.abc import Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError

from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.errors import FencedLeaderEpochError, NotLeaderError, StaleZkVersionError, UnknownTopicError


def alter_isr(client: KazooClient, broker_id: int, topic: str, partition: int, leader_epoch: int,
              new_isr: Sequence[int], zk_version: int) -> zk_data.PartitionState:
    """Write `new_isr` if the state znode is still at `zk_version` and led by `broker_id` in
    `leader_epoch`; answers the written state (with its new zk_version).

    StaleZkVersionError when the znode moved on (re-read the state: the controller may have
    elected another leader), FencedLeaderEpochError / NotLeaderError when the state read shows
    the caller is not this epoch's leader. Blocking: call it off the event loop."""
    path = zk_data.partition_state_path(topic, partition)
    try:
        data, stat = client.get(path)
    except NoNodeError:
        raise UnknownTopicError(f"{topic}-{partition} has no state") from None
    current = zk_data.decode_partition_state(data, stat.version)
    if stat.version != zk_version:
        raise StaleZkVersionError(f"{topic}-{partition}: zk version {zk_version} is stale, now {stat.version}")
    if current.leader != broker_id:
        raise NotLeaderError(f"{topic}-{partition} is led by {current.leader}, not {broker_id}")
    if current.leader_epoch != leader_epoch:
        raise FencedLeaderEpochError(f"{topic}-{partition}: epoch {leader_epoch} is not {current.leader_epoch}")
    if broker_id not in new_isr:
        raise ValueError("a leader cannot remove itself from the ISR")
    written = zk_data.PartitionState(leader=broker_id, leader_epoch=leader_epoch, isr=tuple(new_isr),
                                     controller_epoch=current.controller_epoch)
    try:
        stat = client.set(path, zk_data.encode_partition_state(written), version=zk_version)
    except BadVersionError:
        raise StaleZkVersionError(f"{topic}-{partition}: zk version {zk_version} is stale") from None
    client.create(zk_data.isr_change_path(), zk_data.encode_isr_change([(topic, partition)]),
                  sequence=True, makepath=True)
    return zk_data.PartitionState(leader=written.leader, leader_epoch=written.leader_epoch, isr=written.isr,
                                  controller_epoch=written.controller_epoch, zk_version=stat.version)
