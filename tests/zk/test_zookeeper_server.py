"""The fixture's server is a real ZooKeeper: znodes written by one session are read by another."""

from __future__ import annotations

from kazoo.client import KazooClient


def test_a_real_zookeeper_on_loopback(zookeeper, zk) -> None:
    assert "Mode: standalone" in zookeeper.four_letter_word("srvr")
    zk.ensure_path("/consumers/g/offsets/t")
    zk.create("/consumers/g/offsets/t/0", b"42")
    other = KazooClient(hosts=zookeeper.connect, timeout=10.0)
    other.start(timeout=30)
    try:
        assert other.get("/consumers/g/offsets/t/0")[0] == b"42"
    finally:
        other.stop()
        other.close()
