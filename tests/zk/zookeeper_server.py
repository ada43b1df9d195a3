"""The tests' real ZooKeeper server: the product's own (tidemark.zk.local_server)."""

from tidemark.zk.local_server import ZOOKEEPER_JAR, ZooKeeperServer, zookeeper_available

__all__ = ["ZOOKEEPER_JAR", "ZooKeeperServer", "zookeeper_available"]
