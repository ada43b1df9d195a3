"""Topic administration from any broker, as Kafka's AdminZkClient: CreateTopics, CreatePartitions
and DeleteTopics write requests into ZooKeeper, and the controller acts on them (it creates the
partition state znodes of new partitions, and removes a topic listed under /admin/delete_topics).

A topic's /config/topics/T and /brokers/topics/T are written in one multi, so a topic is never
seen without its configs."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidemark.cluster.embedded import validate_topic_name
from tidemark.cluster.zk import zk_data
from tidemark.cluster.zk.assignment import (
    RackAwareMode,
    assign_replicas_to_brokers,
    broker_racks,
    start_index_for_new_partitions,
)
from tidemark.cluster.zk.errors import (
    InvalidPartitionsError,
    TopicExistsError,
    UnknownTopicError,
)
from tidemark.cluster.zk.fencing import first_failure


def live_broker_ids(client: KazooClient) -> list[int]:
    return sorted(int(child) for child in client.get_children(zk_data.BROKER_IDS))


def live_broker_racks(client: KazooClient, mode: RackAwareMode) -> dict[int, str | None]:
    """Each live broker's rack from its registration, as assignment takes them under `mode`."""
    racks: dict[int, str | None] = {}
    for broker_id in live_broker_ids(client):
        try:
            racks[broker_id] = zk_data.decode_broker(broker_id, client.get(zk_data.broker_path(broker_id))[0]).rack
        except NoNodeError:
            continue  # gone since listed
    return broker_racks(racks, mode)


def read_assignment(client: KazooClient, topic: str) -> tuple[zk_data.TopicAssignment, int]:
    """The topic's assignment and its znode version; UnknownTopicError when there is none."""
    try:
        data, stat = client.get(zk_data.topic_path(topic))
    except NoNodeError:
        raise UnknownTopicError(f"Topic {topic} does not exist.") from None
    return zk_data.decode_topic(data), stat.version


def create_topic(client: KazooClient, name: str, partitions: int, replication_factor: int,
                 configs: Mapping[str, str] | None = None, *, topic_id: uuid.UUID | None = None,
                 assignment: Mapping[int, tuple[int, ...]] | None = None, start_index: int = -1,
                 rng: random.Random | None = None,
                 rack_aware_mode: RackAwareMode = RackAwareMode.ENFORCED) -> zk_data.TopicAssignment:
    """Assign the replicas over the live brokers (Kafka's round robin, rack-aware when the
    brokers have racks; an explicit `assignment` is taken as it is) and write the topic.
    TopicExistsError, InvalidPartitionsError, InvalidReplicationFactorError (above the live broker
    count), RackInformationError (racks mixed, `rack_aware_mode` ENFORCED) as Kafka answers
    CreateTopics."""
    validate_topic_name(name)
    if client.exists(zk_data.topic_path(name)) is not None:
        raise TopicExistsError(f"Topic '{name}' already exists.")
    if assignment is None:
        racks = live_broker_racks(client, rack_aware_mode)
        assignment = assign_replicas_to_brokers(list(racks), partitions, replication_factor,
                                                start_index=start_index, rng=rng, racks=racks)
    topic = zk_data.TopicAssignment(partitions=dict(assignment), topic_id=topic_id or uuid.uuid4())
    transaction = client.transaction()
    config_path = zk_data.topic_config_path(name)
    if client.exists(config_path) is None:
        transaction.create(config_path, zk_data.encode_topic_config(configs or {}))
    else:  # Kafka overwrites configs a deleted topic of that name may have left
        transaction.set_data(config_path, zk_data.encode_topic_config(configs or {}))
    transaction.create(zk_data.topic_path(name), zk_data.encode_topic(topic))
    failure = first_failure(transaction.commit())
    if isinstance(failure, NodeExistsError):
        raise TopicExistsError(f"Topic '{name}' already exists.")
    if failure is not None:
        raise failure
    return topic


def add_partitions(client: KazooClient, name: str, total_count: int,
                   assignment: Mapping[int, tuple[int, ...]] | None = None,
                   rng: random.Random | None = None) -> zk_data.TopicAssignment:
    """CreatePartitions: grow the topic to `total_count` partitions, continuing partition 0's
    round robin over the live brokers (rack-aware as CreateTopics); the write is conditional on
    the topic znode's version."""
    current, version = read_assignment(client, name)
    existing = len(current.partitions)
    if total_count <= existing:
        raise InvalidPartitionsError(
            f"Topic currently has {existing} partitions, {total_count} would not be an increase.")
    if assignment is None:
        racks = live_broker_racks(client, RackAwareMode.ENFORCED)
        brokers = sorted(racks)
        replicas_zero = current.partitions[0]
        assignment = assign_replicas_to_brokers(
            brokers, total_count - existing, len(replicas_zero),
            start_index=start_index_for_new_partitions(brokers, replicas_zero),
            start_partition_id=existing, rng=rng, racks=racks)
    grown = zk_data.TopicAssignment(partitions={**current.partitions, **assignment}, topic_id=current.topic_id)
    try:
        client.set(zk_data.topic_path(name), zk_data.encode_topic(grown), version=version)
    except BadVersionError:
        raise InvalidPartitionsError(f"Topic {name} was changed concurrently; try again.") from None
    return grown


def delete_topic(client: KazooClient, name: str) -> None:
    """Mark the topic for deletion; the controller removes its znodes."""
    if client.exists(zk_data.topic_path(name)) is None:
        raise UnknownTopicError(f"Topic {name} does not exist.")
    try:
        client.create(zk_data.delete_topic_path(name), b"", makepath=True)
    except NodeExistsError:
        pass  # already marked


def read_topic_config(client: KazooClient, name: str) -> dict[str, str]:
    try:
        return zk_data.decode_topic_config(client.get(zk_data.topic_config_path(name))[0])
    except NoNodeError:
        return {}
