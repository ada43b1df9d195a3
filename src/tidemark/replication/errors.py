"""What the replication layer raises; broker/errors.py maps each to its Kafka error code."""


class PartitionDeletedError(Exception):
    """The partition was deleted while a request waited on it."""


class NotLeaderOrFollowerError(Exception):
    """This broker no longer leads the partition (at the epoch a waiting request appended under)."""


class NotEnoughReplicasError(Exception):
    """Fewer in-sync replicas than min.insync.replicas: refused before appending."""


class NotEnoughReplicasAfterAppendError(Exception):
    """Appended, but the in-sync replicas shrank below min.insync.replicas meanwhile."""
