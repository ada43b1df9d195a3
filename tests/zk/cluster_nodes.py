"""Brokers' ZooKeeper sides for the cluster tests: a session each, its registration, controller
and metadata view; an observer that waits on watched changes; a session expiry on demand."""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.client import KazooClient

from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.controller import Controller
from tidemark.cluster.zk.metadata_view import ClusterSnapshot, ZkMetadataView
from tidemark.cluster.zk.registration import BrokerRegistration
from tidemark.cluster.zk.session import ZkSession, connect

SESSION_TIMEOUT_MS = 4000
WAIT_S = 30.0  # bound of every wait on a watched change


class Observer:
    """A metadata view on its own session whose changes tests wait on."""

    def __init__(self, connect_string: str) -> None:
        self.client = connect(connect_string, SESSION_TIMEOUT_MS)
        self._changed = threading.Condition()
        self.view = ZkMetadataView(self.client, on_change=self._notify)
        self.view.start()

    def _notify(self, _snapshot: ClusterSnapshot) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait(self, predicate: Callable[[ClusterSnapshot], bool], what: str) -> ClusterSnapshot:
        with self._changed:
            if not self._changed.wait_for(lambda: predicate(self.view.snapshot), WAIT_S):
                raise AssertionError(f"not within {WAIT_S}s: {what}; last snapshot {self.view.snapshot}")
        return self.view.snapshot

    def close(self) -> None:
        self.view.close()
        self.client.stop()
        self.client.close()


class Node:
    """One broker's ZooKeeper side: registered, taking part in the controller election."""

    def __init__(self, connect_string: str, broker_id: int, port: int | None = None) -> None:
        self.broker_id = broker_id
        # A broker's session: the controller runs its events on the session's threads.
        self.session = ZkSession(connect_string, SESSION_TIMEOUT_MS)
        self.client = self.session.client
        self.client.start(timeout=WAIT_S)
        self.registration = BrokerRegistration(self.client, zk_data.BrokerInfo(broker_id, "127.0.0.1", port or 9090 + broker_id))
        self.registration.register()
        self.controller = Controller(self.session, broker_id)
        self.controller.start()

    def stop(self) -> None:
        """A broker lost at once: its session ends, its ephemeral znodes go."""
        self.registration.close()
        self.controller.close()
        self.client.stop()
        self.client.close()


def expire_session(connect_string: str, client: KazooClient) -> None:
    """End `client`'s session from the server's side, as a broker paused past its session
    timeout finds it: another connection with its id and password closes it."""
    session_id, password = client.client_id
    hosts = connect_string.split("/", 1)[0]  # no chroot: kazoo would check it, racing `client` for the session
    twin = KazooClient(hosts=hosts, client_id=(session_id, password), timeout=SESSION_TIMEOUT_MS / 1000)
    twin.start(timeout=WAIT_S)
    twin.stop()
    twin.close()
