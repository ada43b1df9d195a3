"""The ZooKeeper consumer's registries: its id under the group, the partition owners, the watches.

    /consumers/[group]/ids/[consumer_id]     ephemeral, Kafka's JSON: {"version":1,
                                             "subscription":{topic: #streams},"pattern":"static",
                                             "timestamp":"<ms>"}
    /consumers/[group]/owners/[topic]/[p]    ephemeral, the owning consumer thread id

Ephemeral znodes live as long as the consumer's ZooKeeper session: a consumer that dies loses
its id and its partitions when the session expires, which is what makes the others rebalance.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from tidemark.zk import paths


def subscription_json(topic_counts: Mapping[str, int]) -> bytes:
    return json.dumps({"version": 1, "subscription": dict(topic_counts), "pattern": "static",
                       "timestamp": str(int(time.time() * 1000))}).encode()


def parse_subscription(data: bytes) -> dict[str, int]:
    """A registration's topic counts: Kafka's JSON, or the bare {topic: #streams} map of the
    ZooKeeper-era docs."""
    value = json.loads(data.decode() or "{}")
    counts = value.get("subscription", value) if isinstance(value, dict) else {}
    return {str(topic): int(n) for topic, n in counts.items() if isinstance(n, int)}


class ConsumerRegistry:
    """One consumer's view of its group in ZooKeeper (kazoo's synchronous API)."""

    def __init__(self, client: KazooClient, group_id: str, consumer_id: str, topic_counts: Mapping[str, int]) -> None:
        self.client = client
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.topic_counts = dict(topic_counts)
        self.owned: set[tuple[str, int]] = set()

    def register(self) -> None:
        """Create our ephemeral id (again after a lost session)."""
        self.client.ensure_path(paths.ids_path(self.group_id))
        try:
            self.client.create(paths.ids_path(self.group_id, self.consumer_id),
                               subscription_json(self.topic_counts), ephemeral=True)
        except NodeExistsError:
            pass  # still ours: the session survived

    def deregister(self) -> None:
        try:
            self.client.delete(paths.ids_path(self.group_id, self.consumer_id))
        except NoNodeError:
            pass

    def watch(self, changed: Callable[[], None]) -> list[ChildrenWatch | DataWatch]:
        """Call `changed` (in kazoo's thread) when a consumer of the group, a broker or a topic
        comes or goes, or a subscribed topic's partitions change (Kafka's
        ZKTopicPartitionChangeListener: a watch on /brokers/topics/[topic]'s data, which
        CreatePartitions rewrites); it is also called once at once per watch."""
        watched = [paths.ids_path(self.group_id), paths.BROKER_IDS, paths.BROKER_TOPICS]
        watches: list[ChildrenWatch | DataWatch] = []
        for path in watched:
            self.client.ensure_path(path)
            watches.append(ChildrenWatch(self.client, path, lambda _children: changed()))
        for topic in sorted(self.topic_counts):
            watches.append(DataWatch(self.client, f"{paths.BROKER_TOPICS}/{topic}", lambda _data, _stat: changed()))
        return watches

    def topic_partitions(self) -> dict[str, list[int]]:
        """The partitions of each subscribed topic registered in ZooKeeper (Kafka's JSON at
        /brokers/topics/[topic]); a topic not registered there is left out."""
        found = {}
        for topic in self.topic_counts:
            try:
                data, _ = self.client.get(f"{paths.BROKER_TOPICS}/{topic}")
            except NoNodeError:
                continue
            try:
                assignment = json.loads(data.decode() or "{}").get("partitions", {})
                found[topic] = sorted(int(p) for p in assignment)
            except (ValueError, AttributeError):
                continue  # not Kafka's JSON: the broker's metadata decides
        return found

    def subscriptions(self) -> dict[str, dict[str, int]]:
        """Every registered consumer's topic counts (a consumer gone meanwhile is left out)."""
        ids_path = paths.ids_path(self.group_id)
        found = {}
        for consumer_id in self.client.get_children(ids_path):
            try:
                data, _ = self.client.get(f"{ids_path}/{consumer_id}")
            except NoNodeError:
                continue
            found[consumer_id] = parse_subscription(data)
        return found

    def claim(self, partition: tuple[str, int], thread_id: str, released: threading.Event) -> str | None:
        """Create the owner znode; None when we own it now, else the current owner, with a watch
        that sets `released` when it lets go."""
        path = paths.owners_path(self.group_id, *partition)
        self.client.ensure_path(paths.owners_path(self.group_id, partition[0]))
        try:
            self.client.create(path, thread_id.encode(), ephemeral=True)
        except NodeExistsError:
            try:
                data, _ = self.client.get(path, watch=lambda _event: released.set())
            except NoNodeError:
                released.set()  # gone already: the next attempt gets it
                return "(released meanwhile)"
            if data.decode() != thread_id:
                return data.decode()
        self.owned.add(partition)
        return None

    def release(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        """Delete our owner znodes (all of them by default)."""
        for partition in list(self.owned if partitions is None else partitions):
            try:
                self.client.delete(paths.owners_path(self.group_id, *partition))
            except NoNodeError:
                pass
            self.owned.discard(partition)


def group_owners(client: KazooClient, group_id: str) -> dict[tuple[str, int], str]:
    """Every owner znode of a group: (topic, partition) -> the owning thread id."""
    found = {}
    root = paths.owners_path(group_id)
    for topic in _children(client, root):
        for partition in _children(client, f"{root}/{topic}"):
            try:
                data, _ = client.get(f"{root}/{topic}/{partition}")
            except NoNodeError:
                continue
            found[topic, int(partition)] = data.decode()
    return found


def _children(client: KazooClient, path: str) -> list[str]:
    try:
        return client.get_children(path)
    except NoNodeError:
        return []
