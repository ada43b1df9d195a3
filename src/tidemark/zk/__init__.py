"""ZooKeeper, where Kafka consumers kept their offsets before the offsets topic (kazoo client)."""
