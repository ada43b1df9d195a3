"""A broker's view of the cluster, kept current by ZooKeeper watches: live brokers, the
controller, every topic's assignment and every partition's state (with its zk_version).

This is how brokers learn leadership (instead of Kafka's LeaderAndIsr/UpdateMetadata requests):
each broker watches the state znodes and acts on the latest state it read; leader epochs on
every replica Fetch and leader-side write refuse whoever acts on a stale one.

Threading: watches fire in kazoo's threads. Each change replaces the snapshot (an immutable
ClusterSnapshot, read without locking from any thread) and then calls `on_change(snapshot)` in
that kazoo thread, one call at a time, in the order of the changes. The callback must not block:
an asyncio broker hops onto its loop with loop.call_soon_threadsafe.

What changed: the view keeps, until `take_changes()`, the partitions whose assignment or state
changed (and whether any topic did), so that a broker applying changes visits only those: the
cost of a change is O(partitions changed), whatever the cluster's size.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from tidemark.cluster.zk import zk_data

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    state: zk_data.PartitionState | None  # None until the controller created it

    @property
    def leader(self) -> int:
        return self.state.leader if self.state else zk_data.NO_LEADER

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state else -1

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state else ()

    @property
    def zk_version(self) -> int:
        return self.state.zk_version if self.state else -1


@dataclasses.dataclass(frozen=True)
class ClusterSnapshot:
    brokers: Mapping[int, zk_data.BrokerInfo]  # live (registered) brokers
    controller_id: int  # -1 while there is none
    topics: Mapping[str, zk_data.TopicAssignment]
    partitions: Mapping[TopicPartition, PartitionView]
    # Each topic's config overrides as read when the view first saw the topic (later changes
    # come as /config/changes notices): a broker hosting a new topic needs no read of its own.
    topic_configs: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=lambda: MappingProxyType({}))

    def offline_replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """Metadata's offline_replicas: assigned replicas whose broker is not live."""
        return tuple(r for r in self.partitions[topic, partition].replicas if r not in self.brokers)

    def led_by(self, broker_id: int) -> list[PartitionView]:
        return [p for p in self.partitions.values() if p.leader == broker_id]


EMPTY = ClusterSnapshot(MappingProxyType({}), -1, MappingProxyType({}), MappingProxyType({}))


@dataclasses.dataclass(frozen=True)
class MetadataDelta:
    """The view now, and what changed since the previous take_changes()."""

    snapshot: ClusterSnapshot
    partitions: frozenset[TopicPartition]  # assignment or state changed, created or deleted
    topics_changed: bool  # a topic was created, deleted or reassigned


class ZkMetadataView:
    def __init__(self, client: KazooClient, on_change: Callable[[ClusterSnapshot], None] | None = None) -> None:
        self.client = client
        self.on_change = on_change
        self.snapshot: ClusterSnapshot = EMPTY
        self._lock = threading.RLock()
        self._brokers: dict[int, zk_data.BrokerInfo] = {}
        self._controller = -1
        self._topics: dict[str, zk_data.TopicAssignment] = {}
        self._topic_configs: dict[str, Mapping[str, str]] = {}
        self._states: dict[TopicPartition, zk_data.PartitionState] = {}
        self._partitions: dict[TopicPartition, PartitionView] = {}
        self._changed: set[TopicPartition] = set()  # since the last take_changes()
        self._topics_changed = False
        self._watched: set[str] = set()  # znode paths with a live DataWatch of ours
        self._closed = False

    def start(self) -> None:
        """Set the watches; the first snapshot is complete when this returns (kazoo reads each
        watched znode once as the watch is set)."""
        for path in (zk_data.BROKER_IDS, zk_data.TOPICS):
            self.client.ensure_path(path)
        DataWatch(self.client, zk_data.CONTROLLER, self._controller_changed)
        ChildrenWatch(self.client, zk_data.BROKER_IDS, self._broker_ids)
        ChildrenWatch(self.client, zk_data.TOPICS, self._topic_names)

    def close(self) -> None:
        self._closed = True  # each watch stops at its next event

    def take_changes(self) -> MetadataDelta:
        """The current snapshot with what changed since the last call (any thread)."""
        with self._lock:
            delta = MetadataDelta(self.snapshot, frozenset(self._changed), self._topics_changed)
            self._changed.clear()
            self._topics_changed = False
        return delta

    # -- watch callbacks (kazoo's threads) ---------------------------------------------------

    def _watch(self, path: str, callback: Callable[[bytes | None, Any], bool | None]) -> None:
        with self._lock:
            if path in self._watched:
                return
            self._watched.add(path)
        DataWatch(self.client, path, callback)

    def _controller_changed(self, data: bytes | None, _stat: Any) -> bool | None:
        if self._closed:
            return False
        with self._lock:
            self._controller = zk_data.decode_controller(data) if data else -1
            self._publish()
        return None

    def _broker_ids(self, children: list[str]) -> bool | None:
        if self._closed:
            return False
        for child in children:
            broker_id = int(child)
            self._watch(zk_data.broker_path(broker_id), self._broker_watcher(broker_id))
        return None

    def _broker_watcher(self, broker_id: int) -> Callable[[bytes | None, Any], bool | None]:
        path = zk_data.broker_path(broker_id)

        def watcher(data: bytes | None, _stat: Any) -> bool | None:
            with self._lock:
                if data is None:
                    self._watched.discard(path)
                    changed = self._brokers.pop(broker_id, None) is not None
                else:
                    self._brokers[broker_id] = zk_data.decode_broker(broker_id, data)
                    changed = True
                if changed:
                    self._publish()
            return False if data is None or self._closed else None
        return watcher

    def _topic_names(self, children: list[str]) -> bool | None:
        if self._closed:
            return False
        for topic in children:
            self._watch(zk_data.topic_path(topic), self._topic_watcher(topic))
        return None

    def _topic_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        path = zk_data.topic_path(topic)

        def watcher(data: bytes | None, _stat: Any) -> bool | None:
            assignment = zk_data.decode_topic(data) if data is not None else None
            known = self._topics.get(topic)
            configs = None  # read here, in kazoo's thread, not by the broker on its event loop
            if assignment is not None and (known is None or known.topic_id != assignment.topic_id):
                configs = self._read_topic_configs(topic)
            with self._lock:
                if assignment is None:
                    self._watched.discard(path)
                    self._topic_configs.pop(topic, None)
                    gone = self._topics.pop(topic, None)
                    for partition in gone.partitions if gone is not None else ():
                        self._states.pop((topic, partition), None)
                        self._set_partition(topic, partition, None)
                    self._topics_changed = True
                    self._publish()
                    return False
                self._topics[topic] = assignment
                if configs is not None:
                    self._topic_configs[topic] = configs
                for partition, replicas in assignment.partitions.items():
                    self._set_partition(topic, partition, replicas)
                self._topics_changed = True
                self._publish()
            for partition in assignment.partitions:
                self._watch(zk_data.partition_state_path(topic, partition), self._state_watcher(topic, partition))
            return False if self._closed else None
        return watcher

    def _state_watcher(self, topic: str, partition: int) -> Callable[[bytes | None, Any], bool | None]:
        path = zk_data.partition_state_path(topic, partition)

        def watcher(data: bytes | None, stat: Any) -> bool | None:
            with self._lock:
                if data is None:
                    changed = self._states.pop((topic, partition), None) is not None
                    if topic not in self._topics:  # deleted with its topic: stop watching
                        self._watched.discard(path)
                        if changed:
                            self._publish()
                        return False
                else:
                    self._states[topic, partition] = zk_data.decode_partition_state(data, stat.version, stat.mzxid)
                    changed = True
                if changed:
                    assignment = self._topics.get(topic)
                    self._set_partition(topic, partition,
                                        assignment.partitions.get(partition) if assignment is not None else None)
                    self._publish()
            return False if self._closed else None
        return watcher

    def _read_topic_configs(self, topic: str) -> Mapping[str, str] | None:
        """/config/topics/T ({} when absent); None when ZooKeeper did not answer (the broker
        then reads them itself)."""
        try:
            data, _ = self.client.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            return MappingProxyType({})
        except KazooException:
            return None
        return MappingProxyType(zk_data.decode_topic_config(data))

    def _set_partition(self, topic: str, partition: int, replicas: tuple[int, ...] | None) -> None:
        """One partition's view anew (None: it is gone), marked changed. Under self._lock."""
        key = (topic, partition)
        if replicas is None:
            self._partitions.pop(key, None)
        else:
            self._partitions[key] = PartitionView(topic, partition, replicas, self._states.get(key))
        self._changed.add(key)

    def _publish(self) -> None:  # under self._lock
        # The maps are copied whole (C speed); the per-partition work happened in _set_partition.
        self.snapshot = ClusterSnapshot(
            brokers=MappingProxyType(dict(self._brokers)), controller_id=self._controller,
            topics=MappingProxyType(dict(self._topics)), partitions=MappingProxyType(dict(self._partitions)),
            topic_configs=MappingProxyType(dict(self._topic_configs)))
        if self.on_change is not None:
            self.on_change(self.snapshot)
