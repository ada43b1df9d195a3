"""A broker whose zookeeper.connect names a chroot that does not exist yet creates it, without
kazoo's warning that it should have been created first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BrokerProcess
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available


@pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")
def test_a_new_chroot_starts_without_a_warning(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        broker = BrokerProcess(tmp_path / "data", {"broker.id": "1", "zookeeper.connect": f"{zookeeper.connect}/tm",
                                                   "offsets.topic.replication.factor": "1"}).start()
        try:
            broker.wait_for_log('"broker_started"')
        finally:
            assert broker.stop() == 0
    finally:
        zookeeper.stop()
    assert "No chroot path exists" not in broker.log_text()
