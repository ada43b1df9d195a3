"""Kafka's ZooKeeper consumer: ZooKeeper registry and rebalancing, Kafka protocol fetches."""

from tidemark.consumer.assignment import range_assign
from tidemark.consumer.consumer import ConsumerRebalanceFailed, ZookeeperConsumer

__all__ = ["ConsumerRebalanceFailed", "ZookeeperConsumer", "range_assign"]
