"""ZookeeperConsumer: Kafka's ZooKeeper-coordinated consumer, fetching over the Kafka protocol.

Coordination is ZooKeeper's (registry.py): the consumer registers its id, watches the group's
consumers, the brokers and topics, and each subscribed topic's partitions, and on any change
rebalances: it commits what it consumed, stops fetching, releases its owner znodes, computes the
range assignment (assignment.py) from the registry, claims the owner znode of each partition it
was given (waiting, bounded by rebalance.max.retries, for a previous owner that has not let go
yet, or for the broker to know a grown topic's partitions), reads the partitions' committed
offsets (offsets.py) and only then fetches from them. Fetching is a confluent-kafka Consumer with
assign() (never subscribe(): the broker's group protocol plays no part).

Everything runs in the caller's thread inside poll(); kazoo's watches only raise a flag, so a
record is never delivered from a partition this consumer no longer owns.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition
from kazoo.client import KazooClient, KazooState
from kazoo.retry import KazooRetry

from tidemark.consumer.assignment import owned_by, range_assign
from tidemark.consumer.offsets import KafkaOffsets, OffsetStorage, ZookeeperOffsets
from tidemark.consumer.registry import ConsumerRegistry

# The old consumer's settings (Kafka's names) and their defaults.
DEFAULTS = {
    "offsets.storage": "zookeeper",
    "auto.commit.enable": "true",
    "auto.commit.interval.ms": "60000",
    "auto.offset.reset": "largest",
    "zookeeper.session.timeout.ms": "6000",
    "zookeeper.connection.timeout.ms": "6000",
    "rebalance.max.retries": "4",
    "rebalance.backoff.ms": "2000",
    "offsets.channel.socket.timeout.ms": "10000",
}
REQUIRED = ("zookeeper.connect", "group.id", "bootstrap.servers")

Event = Callable[[dict[str, Any]], None]


class ConsumerRebalanceFailed(Exception):
    """The partitions could not be claimed within rebalance.max.retries attempts."""


def _flag(config: Mapping[str, str], name: str) -> bool:
    value = config[name].strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {config[name]!r}")
    return value == "true"


class ZookeeperConsumer:
    def __init__(self, config: Mapping[str, str], topic_counts: Mapping[str, int],
                 on_event: Event | None = None) -> None:
        missing = [name for name in REQUIRED if not config.get(name)]
        if missing:
            raise ValueError(f"missing consumer settings: {', '.join(missing)}")
        self.config = {**DEFAULTS, **config}
        # Kafka's default: dual commit on with offsets.storage=kafka (the migration's first step).
        self.config.setdefault("dual.commit.enabled", "true" if self.config["offsets.storage"] == "kafka" else "false")
        self.group_id = self.config["group.id"]
        self.consumer_id = self.config.get("consumer.id") or f"{socket.gethostname()}:{uuid.uuid4()}"
        self.on_event = on_event or (lambda _event: None)
        self.auto_commit = _flag(self.config, "auto.commit.enable")
        if self.config["auto.offset.reset"] not in ("smallest", "largest"):
            raise ValueError("auto.offset.reset must be smallest or largest")
        self._timeout_s = int(self.config["offsets.channel.socket.timeout.ms"]) / 1000
        self.zk = KazooClient(hosts=self.config["zookeeper.connect"],
                              timeout=int(self.config["zookeeper.session.timeout.ms"]) / 1000,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
                              command_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))
        self.fetcher = Consumer({
            "bootstrap.servers": self.config["bootstrap.servers"], "group.id": self.group_id,
            "client.id": self.consumer_id, "enable.auto.commit": False, "enable.auto.offset.store": False,
            "log_level": 0,
        })
        self.registry = ConsumerRegistry(self.zk, self.group_id, self.consumer_id, topic_counts)
        self.storage = OffsetStorage(self.config["offsets.storage"], _flag(self.config, "dual.commit.enabled"),
                                     ZookeeperOffsets(self.zk, self.group_id),
                                     KafkaOffsets(self.fetcher, self._timeout_s))
        self.positions: dict[tuple[str, int], int] = {}  # next offset to deliver, per owned partition
        self._committed: dict[tuple[str, int], int] = {}
        self._changed = threading.Event()  # set from kazoo's thread: rebalance before the next poll
        self._wake = threading.Event()  # a rebalance attempt waiting for an owner to let go
        self._session_lost = False
        self._next_commit = 0.0
        self._closed = False
        self._watches: list[Any] = []
        self._members: list[str] = []  # the registry the last assignment was computed from

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ZookeeperConsumer:
        self.zk.add_listener(self._zk_state)
        self.zk.start(timeout=int(self.config["zookeeper.connection.timeout.ms"]) / 1000)
        self.registry.register()
        self._watches = self.registry.watch(self._registry_changed)
        self._changed.set()  # the consumer's own first rebalance
        self.on_event({"event": "registered", "consumer_id": self.consumer_id})
        return self

    def close(self) -> None:
        """Commit what was consumed, give the partitions and the id back, disconnect."""
        if self._closed:
            return
        self._closed = True
        if self._session_lost:  # nothing is ours any more (see rebalance)
            self.positions.clear()
            self.registry.owned.clear()
        try:
            if self.auto_commit and self.zk.connected:
                self.commit()
            self.fetcher.unassign()
            if self.zk.connected:
                self.registry.release()
                self.registry.deregister()
        finally:
            self.zk.stop()
            self.zk.close()
            self.fetcher.close()
        self.on_event({"event": "closed", "consumer_id": self.consumer_id})

    def _registry_changed(self) -> None:  # kazoo's thread: flags only
        self._changed.set()
        self._wake.set()

    def _zk_state(self, state: str) -> None:  # kazoo's thread: flags only
        # A dropped connection that comes back within the session changes nothing; an expired
        # session took our id and owner znodes with it: register and rebalance again.
        if state == KazooState.LOST:
            self._session_lost = True
            self._registry_changed()

    # -- consuming ------------------------------------------------------------------------------

    def poll(self, timeout_s: float, max_records: int = 500) -> list[Message]:
        """Records from the partitions this consumer owns, in order per partition."""
        if self._changed.is_set():
            self.rebalance()
        if self.auto_commit and time.monotonic() >= self._next_commit:
            self.commit()
        delivered = []
        for msg in self.fetcher.consume(num_messages=max_records, timeout=timeout_s):
            if msg.error() is not None:
                continue  # partition EOF and transient fetch errors: librdkafka retries
            tp = (msg.topic(), msg.partition())
            if tp not in self.positions or msg.offset() < self.positions[tp]:
                continue  # fetched before a rebalance took the partition or moved its position
            self.positions[tp] = msg.offset() + 1
            delivered.append(msg)
        return delivered

    def commit(self) -> None:
        """Commit the position of every owned partition that moved since the last commit."""
        offsets = {tp: pos for tp, pos in self.positions.items() if self._committed.get(tp) != pos}
        self._next_commit = time.monotonic() + int(self.config["auto.commit.interval.ms"]) / 1000
        if not offsets:
            return
        self.storage.commit(offsets)
        self._committed.update(offsets)
        self.on_event({"event": "committed", "consumer_id": self.consumer_id, "at": time.monotonic(),
                       "offsets": _named(offsets)})

    # -- rebalancing ----------------------------------------------------------------------------

    def rebalance(self) -> None:
        """Seed 002's rebalance: release, assign by range, claim (retrying), fetch offsets, fetch."""
        retries = int(self.config["rebalance.max.retries"])
        backoff_s = int(self.config["rebalance.backoff.ms"]) / 1000
        for _attempt in range(retries + 1):
            self._changed.clear()
            # A fresh event per attempt: an owner watch left by an earlier attempt fires on a
            # dead one instead of starting a needless rebalance later.
            self._wake = threading.Event()
            if self._session_lost:
                # The expired session took our id and owner znodes; the partitions may be
                # someone else's already: delete nothing, and commit nothing over their commits
                # (what we read since our last commit is read again, never skipped).
                self._session_lost = False
                self.registry.owned.clear()
                self.positions.clear()
                self.registry.register()
            self._let_go()
            if self._claim_all():
                self._start_fetching()
                return
            self.registry.release()
            # Until the owner in the way lets go, the registry changes or the broker catches up
            # with a grown topic; bounded.
            self._wake.wait(backoff_s)
        raise ConsumerRebalanceFailed(f"{self.consumer_id} could not claim its partitions in {retries + 1} attempts")

    def _let_go(self) -> None:
        """Commit what was consumed, stop fetching, release the owner znodes."""
        if self.positions and self.auto_commit:
            self.commit()
        self.fetcher.unassign()
        self.positions.clear()
        self._committed.clear()
        self.registry.release()

    def _claim_all(self) -> bool:
        subscriptions = self.registry.subscriptions()
        self._members = sorted(subscriptions)
        if self.consumer_id not in subscriptions:
            return True  # not registered any more (closing): nothing to own
        partitions = self._partitions()
        if partitions is None:
            return False  # the broker has not caught up with ZooKeeper's partitions yet: try again
        mine = owned_by(range_assign(partitions, subscriptions), self.consumer_id)
        for tp, thread in sorted(mine.items()):
            if self.registry.claim(tp, thread, self._wake) is not None:
                return False
        return True

    def _partitions(self) -> dict[str, list[int]] | None:
        """The subscribed topics' partitions: ZooKeeper's, as Kafka's consumer read them, for a
        topic registered there, else the broker's metadata; None while the broker does not know
        every partition ZooKeeper has (a topic that just grew)."""
        metadata = self.fetcher.list_topics(timeout=self._timeout_s)
        known = {topic: sorted(metadata.topics[topic].partitions) for topic in self.registry.topic_counts
                 if topic in metadata.topics and metadata.topics[topic].error is None}
        registered = self.registry.topic_partitions()
        if any(not set(partitions) <= set(known.get(topic, ())) for topic, partitions in registered.items()):
            return None
        return {**known, **registered}

    def _start_fetching(self) -> None:
        owned = sorted(self.registry.owned)
        committed = self.storage.fetch(owned)
        start = {tp: committed[tp] if tp in committed else self._reset_offset(tp) for tp in owned}
        self.positions = dict(start)
        self._committed = dict(committed)
        self.fetcher.assign([TopicPartition(t, p, o) for (t, p), o in start.items()])
        self.on_event({"event": "assigned", "consumer_id": self.consumer_id, "at": time.monotonic(),
                       "members": self._members, "partitions": _named(start), "from_commit": sorted(_named(committed))})

    def _reset_offset(self, tp: tuple[str, int]) -> int:
        """auto.offset.reset for a partition without a committed offset: smallest or largest."""
        low, high = self.fetcher.get_watermark_offsets(TopicPartition(*tp), timeout=self._timeout_s)
        if self.config["auto.offset.reset"] == "smallest":
            return low if low >= 0 else OFFSET_BEGINNING
        return high


def _named(offsets: Mapping[tuple[str, int], int]) -> dict[str, int]:
    return {f"{topic}/{partition}": offset for (topic, partition), offset in sorted(offsets.items())}
