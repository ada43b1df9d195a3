"""A broker's registration: the ephemeral /brokers/ids/N, alive as long as its session.

As Kafka's KafkaZkClient.registerBroker: a znode left by this very session (a create retried
after a connection loss) counts as registered; one held by another live session refuses the
start with Kafka's message. After a session expiry kazoo opens a new session by itself and the
registration is made again (Kafka's ZooKeeperClientWatcher -> re-register)."""

from __future__ import annotations

import logging
import threading

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.errors import BrokerIdInUseError

log = logging.getLogger(__name__)


def ensure_persistent_paths(client: KazooClient) -> None:
    for path in zk_data.PERSISTENT_PATHS:
        client.ensure_path(path)
    if client.exists(zk_data.CONTROLLER_EPOCH) is None:
        try:
            client.create(zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(zk_data.INITIAL_CONTROLLER_EPOCH))
        except NodeExistsError:
            pass


def create_checked_ephemeral(client: KazooClient, path: str, data: bytes) -> None:
    """Create an ephemeral znode; one already there is fine only when this session owns it."""
    try:
        client.create(path, data, ephemeral=True)
        return
    except NodeExistsError:
        pass
    try:
        _, stat = client.get(path)
    except NoNodeError:  # its owner's session ended meanwhile: try once more
        client.create(path, data, ephemeral=True)
        return
    session_id = client.client_id[0] if client.client_id else None
    if stat.ephemeralOwner != session_id:
        raise BrokerIdInUseError(
            f"Error while creating ephemeral at {path}, node already exists and owner "
            f"'{stat.ephemeralOwner}' does not match current session '{session_id}'")


class BrokerRegistration:
    """Registers `broker` now and again after every session expiry, until close()."""

    def __init__(self, client: KazooClient, broker: zk_data.BrokerInfo, wait_for_owner_s: float = 0.0) -> None:
        self.client = client
        self.broker = broker
        # A znode left by this broker's previous session (a crash, a stop that could not close its
        # session) goes when that session expires: wait that long for it before refusing.
        self.wait_for_owner_s = wait_for_owner_s
        self._session_lost = False
        self._closed = False
        self.registered = threading.Event()  # set while the znode is ours (tests, status)
        # The czxid of the current registration (Kafka's broker epoch): states written before it
        # give no leadership (roles.leads_from).
        self.czxid: int | None = None

    def register(self) -> None:
        """BrokerIdInUseError when another live broker has this id (still, after wait_for_owner_s)."""
        ensure_persistent_paths(self.client)
        path, data = zk_data.broker_path(self.broker.id), zk_data.encode_broker(self.broker)
        try:
            create_checked_ephemeral(self.client, path, data)
        except BrokerIdInUseError:
            gone = threading.Event()
            if self.client.exists(path, watch=lambda _event: gone.set()) is not None \
                    and not gone.wait(self.wait_for_owner_s):
                raise
            create_checked_ephemeral(self.client, path, data)
        self._learn_czxid()
        self.registered.set()
        self.client.add_listener(self._state_changed)

    def _learn_czxid(self) -> None:
        stat = self.client.exists(zk_data.broker_path(self.broker.id))
        if stat is not None:
            self.czxid = stat.czxid

    def close(self) -> None:
        self._closed = True
        self.client.remove_listener(self._state_changed)

    def _state_changed(self, state: str) -> None:  # kazoo's connection thread: must not block
        if state == KazooState.LOST:
            self._session_lost = True
            self.registered.clear()
        elif state == KazooState.CONNECTED and self._session_lost and not self._closed:
            self._session_lost = False
            self.client.handler.spawn(self._register_again)

    def _register_again(self) -> None:
        try:
            create_checked_ephemeral(self.client, zk_data.broker_path(self.broker.id),
                                     zk_data.encode_broker(self.broker))
            self._learn_czxid()
            self.registered.set()
            log.info("broker %d registered again after its session expired", self.broker.id)
        except Exception:  # noqa: BLE001 - logged; the broker sees registered unset
            log.exception("broker %d could not register again", self.broker.id)
