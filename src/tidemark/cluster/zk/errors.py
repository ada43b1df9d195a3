"""Errors of the ZooKeeper cluster layer, named after the Kafka errors they become."""

from __future__ import annotations


class ClusterError(Exception):
    pass


class BrokerIdInUseError(ClusterError):
    """Another live session holds /brokers/ids/N (Kafka's NodeExistsException at start)."""


class ControllerMovedError(ClusterError):
    """This broker is not (or no longer) the controller: its fenced write was refused
    (Kafka's ControllerMovedException)."""


class InvalidReplicationFactorError(ClusterError):
    """INVALID_REPLICATION_FACTOR (38)."""


class InvalidPartitionsError(ClusterError):
    """INVALID_PARTITIONS (37)."""


class TopicExistsError(ClusterError):
    """TOPIC_ALREADY_EXISTS (36)."""


class UnknownTopicError(ClusterError):
    """UNKNOWN_TOPIC_OR_PARTITION (3)."""


class StaleZkVersionError(ClusterError):
    """A conditional leader/ISR write whose zk_version is no longer the state znode's (Kafka's
    BadVersion: the leader re-reads the state and learns it was superseded)."""


class FencedLeaderEpochError(ClusterError):
    """FENCED_LEADER_EPOCH (74): the caller's leader epoch is not the partition's."""


class NotLeaderError(ClusterError):
    """NOT_LEADER_OR_FOLLOWER (6): the caller does not lead the partition."""


class RackInformationError(ClusterError):
    """Brokers with and without a rack where rack-aware assignment is enforced (Kafka's
    AdminOperationException: CreateTopics answers UNKNOWN_SERVER_ERROR with its message)."""
