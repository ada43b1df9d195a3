"""Embedded single-node cluster metadata: topics, their ids and configs, producer id blocks,
the broker's dynamic settings (its own and the cluster-wide defaults, as Kafka keeps them in
/config/brokers/N and /config/brokers/<default>).

Kafka keeps this in ZooKeeper or the KRaft metadata log; the embedded default keeps it in one
JSON file in the data directory, replaced atomically on every change, so a broker restarted
after a crash sees exactly the topics it acknowledged creating.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

METADATA_FILE = "tidemark-metadata.json"
META_PROPERTIES = "meta.properties"
PRODUCER_ID_BLOCK_SIZE = 1000

# Topics the broker creates itself, with their own settings (the offsets topic, transactions).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME_LENGTH = 249


class InvalidTopicError(ValueError):
    pass


def validate_topic_name(name: str | None) -> None:
    """Kafka's rules: 1..249 of [a-zA-Z0-9._-], and not '.' or '..'."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")


@dataclasses.dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, Any]
    internal: bool = False
    # Each partition's replicas, the first the preferred leader (None: this broker alone).
    replica_assignment: tuple[tuple[int, ...], ...] | None = None

    def hosted_by(self, broker_id: int, partition: int) -> bool:
        return self.replica_assignment is None or broker_id in self.replica_assignment[partition]


def cluster_id_from_uuid(value: uuid.UUID) -> str:
    """Kafka's cluster ids are url-safe base64 of 16 random bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _write_durably(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically: a crash leaves the old file or the new, fsynced."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class EmbeddedMetadata:
    """Topic registry of a single broker, persisted under `data_dir`."""

    def __init__(self, data_dir: Path, node_id: int) -> None:
        self.data_dir = data_dir
        self.node_id = node_id
        self.topics: dict[str, TopicMetadata] = {}
        self._by_id: dict[uuid.UUID, TopicMetadata] = {}
        self._next_producer_id = 0
        self._producer_id_limit = 0  # ids below this are reserved on disk
        self.cluster_id = ""
        # Dynamic broker settings as text, by entity: "<default>" or this broker's id.
        self.broker_configs: dict[str, dict[str, str]] = {}
        self._load()

    @property
    def _path(self) -> Path:
        return self.data_dir / METADATA_FILE

    def _load(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._path.exists():
            state = json.loads(self._path.read_text())
            self.cluster_id = state["cluster_id"]
            self._producer_id_limit = state["producer_id_block_end"]
            self._next_producer_id = self._producer_id_limit
            self.broker_configs = state.get("broker_configs", {})
            for entry in state["topics"]:
                topic = TopicMetadata(
                    name=entry["name"],
                    topic_id=uuid.UUID(entry["topic_id"]),
                    partitions=entry["partitions"],
                    configs=entry["configs"],
                    internal=entry.get("internal", False),
                )
                self.topics[topic.name] = topic
                self._by_id[topic.topic_id] = topic
        else:
            self.cluster_id = cluster_id_from_uuid(uuid.uuid4())
            self._save()
        meta = self.data_dir / META_PROPERTIES
        if not meta.exists():
            _write_durably(meta, f"version=1\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n")

    def _save(self) -> None:
        state = {
            "cluster_id": self.cluster_id,
            "producer_id_block_end": self._producer_id_limit,
            "broker_configs": self.broker_configs,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "partitions": t.partitions,
                    "configs": t.configs,
                    "internal": t.internal,
                }
                for t in self.topics.values()
            ],
        }
        _write_durably(self._path, json.dumps(state, indent=1))

    def get(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._by_id.get(topic_id)

    def create_topic(
        self, name: str, partitions: int, configs: dict[str, Any], *, internal: bool = False
    ) -> TopicMetadata:
        validate_topic_name(name)
        if name in self.topics:
            raise FileExistsError(name)
        topic = TopicMetadata(name, uuid.uuid4(), partitions, dict(configs), internal)
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        self._save()
        return topic

    def add_partitions(self, name: str, count: int) -> TopicMetadata:
        """Grow a topic to `count` partitions (Kafka never shrinks one)."""
        old = self.topics[name]
        if count <= old.partitions:
            raise ValueError(f"{name} has {old.partitions} partitions already")
        topic = dataclasses.replace(old, partitions=count)
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        self._save()
        return topic

    def set_topic_configs(self, name: str, configs: dict[str, Any]) -> TopicMetadata:
        """Replace a topic's overrides (AlterConfigs, IncrementalAlterConfigs)."""
        topic = dataclasses.replace(self.topics[name], configs=dict(configs))
        self.topics[name] = topic
        self._by_id[topic.topic_id] = topic
        self._save()
        return topic

    def set_broker_configs(self, entity: str, configs: dict[str, str]) -> None:
        """Replace an entity's dynamic settings (durably, before they are applied)."""
        if configs:
            self.broker_configs[entity] = dict(configs)
        else:
            self.broker_configs.pop(entity, None)
        self._save()

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.topics.pop(name)
        del self._by_id[topic.topic_id]
        self._save()
        return topic

    @property
    def producer_id_end(self) -> int:
        """Every producer id ever issued is below this: the next id of the current block, or
        after a restart the end of the last block reserved (ids of a block are handed out
        without being recorded one by one, so all of it counts as issued)."""
        return self._next_producer_id

    def next_producer_id(self) -> int:
        """A producer id never handed out before, even across restarts (reserved in blocks)."""
        if self._next_producer_id >= self._producer_id_limit:
            self._producer_id_limit = self._next_producer_id + PRODUCER_ID_BLOCK_SIZE
            self._save()
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id
