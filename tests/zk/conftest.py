"""A real ZooKeeper server per test module (tests.zk.zookeeper_server), and a kazoo client on it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kazoo.client import KazooClient

from tests.zk.cluster_nodes import Node, Observer
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available

if not zookeeper_available():
    pytest.skip("ZooKeeper is not installed (make system-deps installs zookeeperd)", allow_module_level=True)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def zk(zookeeper: ZooKeeperServer) -> Iterator[KazooClient]:
    """A kazoo client connected to the module's server (the tests' view of the znodes)."""
    client = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def chroot(zookeeper: ZooKeeperServer, zk: KazooClient) -> str:
    """A zookeeper.connect string with a fresh chroot: each test has a cluster namespace of its own."""
    path = f"/cluster-{uuid.uuid4().hex[:8]}"
    zk.create(path)
    return zookeeper.connect + path


@pytest.fixture
def observer(chroot: str) -> Iterator[Observer]:
    """A client that watches the cluster's metadata, for controller-level tests."""
    o = Observer(chroot)
    yield o
    o.close()


@pytest.fixture
def cluster(chroot: str, observer: Observer) -> Iterator[dict[int, Node]]:
    """Three controller-level cluster nodes (sessions, registrations, controllers; no broker)."""
    nodes = {b: Node(chroot, b) for b in (1, 2, 3)}
    observer.wait(lambda s: len(s.brokers) == 3 and s.controller_id in nodes, "three brokers and a controller")
    yield nodes
    for node in nodes.values():
        node.stop()
