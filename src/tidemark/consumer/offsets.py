"""Where the ZooKeeper consumer keeps its offsets: offsets.storage and dual.commit.enabled.

    offsets.storage=zookeeper   /consumers/[group]/offsets/[topic]/[partition] (the znode)
    offsets.storage=kafka       the broker's OffsetCommit/OffsetFetch (the offsets topic)
    dual.commit.enabled=true    every commit goes to both; a fetch reads both and takes the
                                larger offset

Dual commit is what makes the rolling bounces of the migration safe: while some consumers of a
group still use one store and others the other, a partition changing hands is read from both,
so it resumes from the newer commit whichever store that is in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from confluent_kafka import Consumer, KafkaException, TopicPartition
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from tidemark.zk import paths

Offsets = dict[tuple[str, int], int]


class OffsetStore(Protocol):
    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None: ...
    def fetch(self, partitions: Iterable[tuple[str, int]]) -> Offsets: ...


class ZookeeperOffsets:
    """The offsets as znodes, written by the consumer itself (as Kafka's ZooKeeper consumer did)."""

    def __init__(self, client: KazooClient, group_id: str) -> None:
        self.client = client
        self.group_id = group_id

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        for (topic, partition), offset in offsets.items():
            path = paths.offsets_path(self.group_id, topic, partition)
            try:
                self.client.set(path, paths.encode_offset(offset))
            except NoNodeError:
                self.client.create(path, paths.encode_offset(offset), makepath=True)

    def fetch(self, partitions: Iterable[tuple[str, int]]) -> Offsets:
        found = {}
        for topic, partition in partitions:
            try:
                data, _ = self.client.get(paths.offsets_path(self.group_id, topic, partition))
            except NoNodeError:
                continue
            found[topic, partition] = paths.decode_offset(data)
        return found


class KafkaOffsets:
    """The offsets through the broker: a standalone commit (no member, generation -1) of the
    client's group.id, and committed() to read them back."""

    def __init__(self, consumer: Consumer, timeout_s: float) -> None:
        self.consumer = consumer
        self.timeout_s = timeout_s

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        if offsets:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                 asynchronous=False)

    def fetch(self, partitions: Iterable[tuple[str, int]]) -> Offsets:
        wanted = [TopicPartition(t, p) for t, p in partitions]
        if not wanted:
            return {}
        found = {}
        for tp in self.consumer.committed(wanted, timeout=self.timeout_s):
            if tp.error is not None:
                raise KafkaException(tp.error)
            if tp.offset >= 0:
                found[tp.topic, tp.partition] = tp.offset
        return found


class OffsetStorage:
    """The consumer's offsets as its offsets.storage and dual.commit.enabled say."""

    def __init__(self, storage: str, dual_commit: bool, zookeeper: OffsetStore, kafka: OffsetStore) -> None:
        if storage not in ("zookeeper", "kafka"):
            raise ValueError(f"offsets.storage must be zookeeper or kafka, not {storage!r}")
        primary, other = (zookeeper, kafka) if storage == "zookeeper" else (kafka, zookeeper)
        self.stores = [primary, other] if dual_commit else [primary]

    def commit(self, offsets: Mapping[tuple[str, int], int]) -> None:
        for store in self.stores:
            store.commit(offsets)

    def fetch(self, partitions: Iterable[tuple[str, int]]) -> Offsets:
        """The committed offset of each partition that has one: the larger of the stores'."""
        wanted = list(partitions)
        merged: Offsets = {}
        for store in self.stores:
            for tp, offset in store.fetch(wanted).items():
                merged[tp] = max(offset, merged.get(tp, offset))
        return merged
