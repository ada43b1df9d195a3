"""Controlled shutdown, asked through ZooKeeper: the broker creates the ephemeral
/admin/controlled_shutdown/N and waits until the controller, having moved N's leaderships away
and taken N out of the ISRs, deletes it. Ephemeral, so a broker that dies while asking leaves no
request behind; the same path serves a broker that is itself the controller."""

from __future__ import annotations

import threading

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import WatchedEvent

from tidemark.cluster.zk import zk_data


def request_controlled_shutdown(client: KazooClient, broker_id: int, timeout_s: float) -> bool:
    """True once the controller has handled the request, False after timeout_s (no controller,
    or it is slow: the broker then shuts down anyway, as Kafka does after its retries). The
    partitions the broker still leads afterwards are those it was the only ISR member of.
    Blocking: call it off the event loop."""
    path = zk_data.controlled_shutdown_path(broker_id)
    done = threading.Event()

    def watch(event: WatchedEvent) -> None:  # kazoo's thread
        if event.type == "DELETED":
            done.set()
        elif client.exists(path, watch=watch) is None:
            done.set()

    client.ensure_path(zk_data.CONTROLLED_SHUTDOWN)
    try:
        client.create(path, b"", ephemeral=True)
    except NodeExistsError:
        pass  # a retry of our own earlier request
    if client.exists(path, watch=watch) is None:
        return True
    handled = done.wait(timeout_s)
    if not handled:
        try:
            client.delete(path)
        except NoNodeError:
            return True  # handled just now
    return handled
