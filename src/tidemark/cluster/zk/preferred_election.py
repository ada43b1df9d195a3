"""Preferred replica election asked through ZooKeeper, as ZooKeeper-era Kafka's admin tools did:
write /admin/preferred_replica_election with the partitions, and the controller, having moved
each one's leadership to its preferred replica where it can, deletes it. One request at a time:
a request already pending is waited out first (Kafka's tool refused with "election currently in
progress"; an API request waits instead, within its timeout)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError
from kazoo.protocol.states import WatchedEvent

from tidemark.cluster.zk import zk_data


def _wait_deleted(client: KazooClient, path: str, deadline: float) -> bool:
    """Whether `path` is absent before `deadline` (time.monotonic())."""
    gone = threading.Event()

    def watch(event: WatchedEvent) -> None:  # kazoo's thread: any event, look again
        if event.type == "DELETED" or client.exists(path, watch=watch) is None:
            gone.set()

    if client.exists(path, watch=watch) is None:
        return True
    return gone.wait(max(0.0, deadline - time.monotonic()))


def request_preferred_election(client: KazooClient, partitions: Sequence[tuple[str, int]], timeout_s: float) -> bool:
    """True once the controller has handled an election request for `partitions`; False after
    timeout_s (no controller, or the one pending before ours not handled yet): the request is
    then left for the controller, which handles it when it can (at the latest at its failover).
    Blocking: call it off the event loop."""
    deadline = time.monotonic() + timeout_s
    path = zk_data.PREFERRED_REPLICA_ELECTION
    while True:
        try:
            client.create(path, zk_data.encode_preferred_replica_election(partitions), makepath=True)
            break
        except NodeExistsError:  # another request is pending: ours follows it
            if not _wait_deleted(client, path, deadline):
                return False
    return _wait_deleted(client, path, deadline)
