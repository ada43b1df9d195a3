"""The topics of a ZooKeeper cluster as the broker's partition manager reads them: the same
interface as the embedded metadata (get, by_id, topics, cluster_id, producer ids), filled from
the watched metadata view; topic changes themselves go through topic_admin and the controller.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from tidemark.cluster.embedded import INTERNAL_TOPICS, TopicMetadata, cluster_id_from_uuid
from tidemark.cluster.zk import config_changes, producer_ids, zk_data

CLUSTER_ID_PATH = "/cluster/id"


def cluster_id(client: KazooClient) -> str:
    """The cluster's id from /cluster/id ({"version":"1","id":...}), created by the first broker."""
    try:
        data, _ = client.get(CLUSTER_ID_PATH)
    except NoNodeError:
        new = cluster_id_from_uuid(uuid.uuid4())
        try:
            client.create(CLUSTER_ID_PATH, zk_data._dumps({"version": "1", "id": new}), makepath=True)
            return new
        except NodeExistsError:
            data, _ = client.get(CLUSTER_ID_PATH)
    return str(zk_data._loads(data)["id"])


class ZkTopicTable:
    def __init__(self, client: KazooClient, broker_id: int,
                 parse_configs: Callable[[Mapping[str, str]], dict[str, Any]]) -> None:
        self.client = client
        self.broker_id = broker_id
        self.parse_configs = parse_configs  # topic config strings -> the broker's typed values
        self.cluster_id = cluster_id(client)
        self.topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0  # this broker's block ends below this
        self._cluster_producer_id_end = 0
        self._watch_producer_id_blocks()

    def update(self, assignments: Mapping[str, zk_data.TopicAssignment],
               read_configs: Mapping[str, Mapping[str, str]] | None = None) -> tuple[list[TopicMetadata], list[str]]:
        """Take the view's topics: (topics new or grown, names gone). A new topic's configs come
        from `read_configs` (the view read them) or, missing there, from ZooKeeper (blocking)."""
        changed = []
        for name, assignment in assignments.items():
            old = self.topics.get(name)
            if old is not None and old.partitions == len(assignment.partitions) \
                    and old.topic_id == assignment.topic_id:
                continue
            if old is not None and old.topic_id == assignment.topic_id:
                configs = old.configs
            elif read_configs is not None and name in read_configs:
                configs = self.parse_configs(read_configs[name])
            else:
                configs = self._configs(name)
            topic = TopicMetadata(name, assignment.topic_id or uuid.uuid5(uuid.NAMESPACE_URL, name),
                                  len(assignment.partitions), configs, name in INTERNAL_TOPICS,
                                  replica_assignment=tuple(assignment.partitions[p]
                                                           for p in sorted(assignment.partitions)))
            self.topics[name] = topic
            self._by_id[topic.topic_id] = topic
            changed.append(topic)
        gone = [name for name in self.topics if name not in assignments]
        for name in gone:
            del self._by_id[self.topics.pop(name).topic_id]
        return changed, gone

    def _configs(self, name: str) -> dict[str, Any]:
        try:
            data, _ = self.client.get(zk_data.topic_config_path(name))
        except NoNodeError:
            return {}
        return self.parse_configs(zk_data.decode_topic_config(data))

    def set_topic_configs(self, name: str, configs: dict[str, Any]) -> TopicMetadata:
        """Replace a topic's overrides in /config/topics/T (AlterConfigs) with a
        /config/changes notice: every other broker reloads them (reload_configs)."""
        config_changes.set_topic_config(self.client, name, configs)
        return self._with_configs(name, configs)

    def read_configs(self, name: str) -> dict[str, Any]:
        """A topic's overrides as ZooKeeper holds them now (another broker may have changed
        them). Blocking: call it off the event loop, then hand them to use_configs on it."""
        return self._configs(name)

    def use_configs(self, name: str, configs: dict[str, Any]) -> TopicMetadata | None:
        """None when this broker does not know the topic (any more)."""
        return self._with_configs(name, configs) if name in self.topics else None

    def _with_configs(self, name: str, configs: dict[str, Any]) -> TopicMetadata:
        topic = dataclasses.replace(self.topics[name], configs=dict(configs))
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        return topic

    def get(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    @property
    def producer_id_end(self) -> int:
        """Every producer id the cluster issued is below this (the latest block's end, kept
        current by a watch: every broker's idempotent producers write to every leader)."""
        return self._cluster_producer_id_end

    def _watch_producer_id_blocks(self) -> None:
        def changed(data: bytes | None, _stat: Any) -> None:  # kazoo's thread; an int write is atomic
            if data:
                self._cluster_producer_id_end = int(zk_data._loads(data)["block_end"]) + 1

        self.client.DataWatch(producer_ids.LATEST_PRODUCER_ID_BLOCK, changed)

    def has_producer_id(self) -> bool:
        """Whether next_producer_id has one without claiming a block (a blocking write)."""
        return self._next_producer_id < self._producer_id_limit

    def use_producer_id_block(self, start: int, end: int) -> None:
        """A block this broker claimed (producer_ids.allocate_block): hand out its ids next."""
        self._next_producer_id, self._producer_id_limit = start, end + 1
        self._cluster_producer_id_end = max(self._cluster_producer_id_end, end + 1)

    def next_producer_id(self) -> int:
        if not self.has_producer_id():  # blocking: the broker claims blocks off its loop first
            self.use_producer_id_block(*producer_ids.allocate_block(self.client, self.broker_id))
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id
