"""Driver-side questions to a Kafka-protocol cluster, through confluent-kafka's AdminClient.

Which partitions a subscription covers, their earliest and latest offsets, a group's committed
offsets, and committing a finished batch's end offsets to a group. Every call is bounded by a
timeout, so a missing cluster fails the query instead of hanging it. With
kafka.isolation.level=read_committed the latest offsets are the last stable offsets, as Spark's
connector's consumer answers them: a batch never plans past an undecided transaction.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from tidemark.spark.clients import check_authentication, quiet
from tidemark.spark.options import Partition, PartitionOffsets, Subscription

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 30.0
T = TypeVar("T")


class ClusterClient:
    def __init__(self, config: dict[str, str], retries: int = 0, retry_interval_ms: int = 0) -> None:
        config = dict(config)
        committed = str(config.pop("isolation.level", "")).lower() == "read_committed"  # a consumer setting
        # list_offsets' isolation_level (its default, READ_UNCOMMITTED, unless read_committed)
        self._isolation = {"isolation_level": IsolationLevel.READ_COMMITTED} if committed else {}
        check_authentication(config)  # refused credentials fail the query now, not after every timeout
        self._admin = AdminClient(quiet(config))
        # fetchOffset.numRetries / fetchOffset.retryIntervalMs: offset lookups retried on failure.
        self.retries = retries
        self.retry_interval_ms = retry_interval_ms

    def _retrying(self, fetch: Callable[[], T]) -> T:
        for attempt in range(self.retries + 1):
            try:
                return fetch()
            except KafkaException as exc:
                if attempt == self.retries:
                    raise
                log.warning("fetching offsets failed (%s), retry %d of %d", exc, attempt + 1, self.retries)
                time.sleep(self.retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def partitions(self, subscription: Subscription) -> list[Partition]:
        """The partitions a subscription covers now: new partitions show up at the next call."""
        if subscription.assigned:
            return list(subscription.assigned)
        metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT_S)
        found = []
        for name, topic in metadata.topics.items():
            if topic.error is None and subscription.matches(name):
                found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def _list_offsets(self, request: dict[Partition, OffsetSpec]) -> PartitionOffsets:
        if not request:
            return {}

        def fetch() -> PartitionOffsets:
            futures = self._admin.list_offsets({TopicPartition(t, p): spec for (t, p), spec in request.items()},
                                               **self._isolation,
                                               request_timeout=REQUEST_TIMEOUT_S)
            return {(tp.topic, tp.partition): future.result(timeout=REQUEST_TIMEOUT_S).offset
                    for tp, future in futures.items()}

        return self._retrying(fetch)

    def for_timestamps(self, timestamps: dict[Partition, int]) -> PartitionOffsets:
        """The first offset stamped at or after each timestamp; -1 where no record is."""
        return self._list_offsets({p: OffsetSpec.for_timestamp(ts) for p, ts in timestamps.items()})

    def earliest(self, partitions: Iterable[Partition]) -> PartitionOffsets:
        return self._list_offsets({p: OffsetSpec.earliest() for p in partitions})

    def latest(self, partitions: Iterable[Partition]) -> PartitionOffsets:
        return self._list_offsets({p: OffsetSpec.latest() for p in partitions})

    def committed(self, group_id: str, partitions: Iterable[Partition]) -> PartitionOffsets:
        """The group's committed offsets (OffsetFetch); partitions without one are left out."""
        request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in partitions])]
        future = self._admin.list_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group_id]
        answer = future.result(timeout=REQUEST_TIMEOUT_S)
        return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}

    def commit(self, group_id: str, offsets: PartitionOffsets) -> bool:
        """Commit offsets for the group as a member-less (admin) commit, as Kafka's tools do.

        Returns whether the cluster took it. A refusal (say, the group has live members of its
        own) is logged, not raised: the Spark checkpoint stays the source of truth.
        """
        if not offsets:
            return True
        partitions = [TopicPartition(t, p, offset) for (t, p), offset in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group_id, partitions)]
        try:
            future = self._admin.alter_consumer_group_offsets(request, request_timeout=REQUEST_TIMEOUT_S)[group_id]
            answer = future.result(timeout=REQUEST_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("offset commit to group %s failed: %s", group_id, exc)
            return False
        failed = [tp for tp in answer.topic_partitions if tp.error is not None]
        if failed:
            log.warning("offset commit to group %s refused for %s", group_id,
                        ", ".join(f"{tp.topic}-{tp.partition}: {tp.error}" for tp in failed))
            return False
        return True
