"""Which leaderships a broker still holds under ZooKeeper's current state (blocking kazoo calls:
run through ZkSession.call).

Read after the broker's session lease was lost and held again, before it acts as a leader
anew: a leadership counts only if its state names this broker at the epoch it knew, and was
written after the broker's current registration (KIP-380's broker epoch). After a session
expiry, the registration of the new session is made again; until then, nothing counts.
"""

from __future__ import annotations

import dataclasses

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tidemark.cluster.zk import zk_data


@dataclasses.dataclass(frozen=True)
class HeldLeaderships:
    registered: bool  # /brokers/ids/N is this session's
    states: dict[int, zk_data.PartitionState | None]  # partition -> its state (None: none)

    def holds(self, broker_id: int, partition: int, leader_epoch: int) -> bool:
        state = self.states.get(partition)
        return self.registered and state is not None and state.leader == broker_id \
            and state.leader_epoch == leader_epoch


def read_held(client: KazooClient, broker_id: int, topic: str, partitions: list[int]) -> HeldLeaderships:
    client.sync("/")  # what ZooKeeper committed before now, whichever server answers
    registration = client.exists(zk_data.broker_path(broker_id))
    session_id = client.client_id[0] if client.client_id else None
    registered = registration is not None and registration.ephemeralOwner == session_id
    states: dict[int, zk_data.PartitionState | None] = {}
    for partition in partitions:
        try:
            data, stat = client.get(zk_data.partition_state_path(topic, partition))
        except NoNodeError:
            states[partition] = None
            continue
        state = zk_data.decode_partition_state(data, stat.version, stat.mzxid)
        # A state written before this registration gives no leadership (roles.leads_from).
        states[partition] = state if registration is not None and state.mzxid > registration.czxid else None
    return HeldLeaderships(registered, states)
