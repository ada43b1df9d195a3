"""The consumer-group chaos test, in the spirit of Kafka's OffsetValidationTest: three brokers on
ZooKeeper, a 6-partition RF=3 topic written continuously, three confluent-kafka consumers of one
group committing synchronously after every batch. Rounds alternate SIGKILL and SIGTERM of the
broker that coordinates the group, restarting it each time. Checked throughout and at the end:

- OffsetFetch never answers less than the last acknowledged commit of a partition;
- every acknowledged record is consumed, no offset is skipped, and a record is read twice only
  after a commit that failed;
- a coordinator move causes no rebalance: every member keeps the assignment of its first join;
- the group ends with lag 0.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient

from tests.zk.test_cluster_brokers import WAIT_S, _bootstrap, _cluster, _metadata, _until, _zk_isr

ROUNDS = 10  # coordinator moves: even rounds SIGKILL, odd rounds SIGTERM
TOPIC = "orders"
PARTITIONS = 6
GROUP = "validation"
CONSUMERS = 3
MAX_RECORDS = 200_000  # the producer stops here at the latest (it is stopped after the rounds)
PRODUCE_BURST = 20  # records between the producer's pauses
PRODUCE_PAUSE_S = 0.02  # pacing only (~1,000 records/s): nothing is asserted on it
OFFSETS_TOPIC = "__consumer_offsets"
FIND_COORDINATOR = 10
OFFSETS_PARTITIONS = 3  # _cluster's offsets.topic.num.partitions


@dataclass
class Ledger:
    """What the clients saw, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    produced: set[tuple[int, int]] = field(default_factory=set)  # acknowledged (partition, offset)
    produce_errors: list[str] = field(default_factory=list)
    consumed: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset), in order
    acked: dict[int, int] = field(default_factory=dict)  # partition -> last acknowledged commit
    commits_acked: int = 0
    commits_failed: list[str] = field(default_factory=list)
    rebalances: list[tuple[int, str, list[int]]] = field(default_factory=list)  # (member, assign/revoke, partitions)
    stats: dict[int, dict] = field(default_factory=dict)  # member -> librdkafka's last cgrp statistics
    fetch_violations: list[str] = field(default_factory=list)
    fetches_checked: int = 0
    consumer_errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def wait(self, predicate, what: str) -> None:
        with self.changed:
            if not self.changed.wait_for(predicate, WAIT_S):
                raise AssertionError(f"not within {WAIT_S}s: {what}; {self.summary()}")

    def summary(self) -> str:
        return (f"produced={len(self.produced)} consumed={len(self.consumed)} commits={self.commits_acked} "
                f"failed={self.commits_failed[-3:]} rebalances={self.rebalances} stats={self.stats}")


def _producer(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 300_000})

    def delivered(error, message) -> None:
        with ledger.changed:
            if error is not None:
                ledger.produce_errors.append(str(error))
            else:
                ledger.produced.add((message.partition(), message.offset()))
            ledger.changed.notify_all()

    sent = 0
    while sent < MAX_RECORDS and not stop.is_set():
        for _ in range(PRODUCE_BURST):
            producer.produce(TOPIC, b"record-%d" % sent, partition=sent % PARTITIONS, on_delivery=delivered)
            sent += 1
        producer.poll(0)
        stop.wait(PRODUCE_PAUSE_S)
    assert producer.flush(WAIT_S * 5) == 0, "the producer's records were not all acknowledged"


def _consumer(member: int, bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    def on_assign(_consumer, partitions) -> None:
        with ledger.changed:
            ledger.rebalances.append((member, "assign", sorted(p.partition for p in partitions)))
            ledger.changed.notify_all()

    def on_revoke(_consumer, partitions) -> None:
        with ledger.changed:
            ledger.rebalances.append((member, "revoke", sorted(p.partition for p in partitions)))
            ledger.changed.notify_all()

    def on_stats(text: str) -> None:
        cgrp = json.loads(text).get("cgrp", {})
        with ledger.lock:
            ledger.stats[member] = {k: cgrp.get(k) for k in ("state", "join_state", "rebalance_cnt",
                                                               "rebalance_reason")}

    consumer = Consumer({"bootstrap.servers": bootstrap, "log_level": 0, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 45_000,
                         "statistics.interval.ms": 1000, "stats_cb": on_stats})
    consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            batch = consumer.consume(100, 0.2)
            offsets: dict[int, int] = {}
            with ledger.changed:
                for message in batch:
                    if message.error():
                        ledger.consumer_errors.append(str(message.error()))
                        continue
                    ledger.consumed.append((message.partition(), message.offset()))
                    offsets[message.partition()] = message.offset() + 1
                ledger.changed.notify_all()
            if offsets:
                _commit(consumer, offsets, ledger)
    finally:
        consumer.close()


def _commit(consumer: Consumer, offsets: dict[int, int], ledger: Ledger) -> None:
    """A synchronous commit; only what the coordinator acknowledged enters the ledger."""
    try:
        answered = consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                                   asynchronous=False)
    except KafkaException as exc:
        with ledger.changed:
            ledger.commits_failed.append(str(exc))
            ledger.changed.notify_all()
        return
    with ledger.changed:
        for tp in answered:
            if tp.error is None:
                ledger.acked[tp.partition] = max(ledger.acked.get(tp.partition, 0), tp.offset)
            else:
                ledger.commits_failed.append(str(tp.error))
        ledger.commits_acked += 1
        ledger.changed.notify_all()


def _offset_fetcher(bootstrap: str, ledger: Ledger, stop: threading.Event) -> None:
    """OffsetFetch in a loop: never below what was acknowledged before the request was sent."""
    # read_uncommitted: librdkafka then asks without require_stable, so a commit still in flight
    # (UNSTABLE_OFFSET_COMMIT, retried until the timeout) does not hide the committed offsets.
    checker = Consumer({"bootstrap.servers": bootstrap, "log_level": 0, "group.id": GROUP, "enable.auto.commit": False,
                        "isolation.level": "read_uncommitted"})
    partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    try:
        while not stop.wait(0.05):
            with ledger.lock:
                before = dict(ledger.acked)
            try:
                answered = checker.committed(partitions, timeout=10)
            except KafkaException:  # no coordinator answered in time (one is being moved): ask again
                continue
            with ledger.lock:
                ledger.fetches_checked += 1
                for tp in answered:
                    acknowledged = before.get(tp.partition)  # None: nothing to hold the answer to yet
                    if tp.error is None and acknowledged is not None and tp.offset < acknowledged:
                        ledger.fetch_violations.append(
                            f"partition {tp.partition}: fetched {tp.offset} < acknowledged {acknowledged}")
    finally:
        checker.close()


def _coordinator(brokers) -> int:
    """The group's coordinator as a running broker names it (FindCoordinator). Not the
    AdminClient's: librdkafka caches a coordinator and keeps sending to it after it went down."""
    for broker in brokers.values():
        if broker.process is not None and broker.process.poll() is None:
            try:
                with RawClient(broker.bootstrap) as client:
                    found = client.request(FIND_COORDINATOR, 1, {"key": GROUP, "key_type": 0})
            except OSError:  # stopping meanwhile: ask the next one
                continue
            if found.error_code == ErrorCode.none:
                return found.node_id
    return -1


def _offsets_isr(zk, chroot: str) -> list[set[int]]:
    return [_zk_isr(zk, chroot, OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]


def test_consumer_group_survives_rounds_of_coordinator_kills_and_shutdowns(make_broker, chroot, zk):
    brokers = _cluster(make_broker, chroot)
    bootstrap = _bootstrap(brokers)
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(WAIT_S)
    _until(lambda: all(len(p.isrs) == 3 for p in _metadata(admin, TOPIC).topics[TOPIC].partitions.values()),
           "three in-sync replicas of every partition")

    ledger = Ledger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    threads = [threading.Thread(target=_producer, args=(bootstrap, ledger, stop_producing), daemon=True)]
    threads += [threading.Thread(target=_consumer, args=(m, bootstrap, ledger, stop_consuming), daemon=True)
                for m in range(CONSUMERS)]
    for thread in threads:
        thread.start()

    def assignments() -> dict[int, list[int]]:
        latest: dict[int, list[int]] = {}
        for member, kind, partitions in ledger.rebalances:
            latest[member] = partitions if kind == "assign" else []
        return latest

    # The initial join (possibly over a few rebalances): every member holds two partitions.
    ledger.wait(lambda: len(assignments()) == CONSUMERS
                and sorted(p for ps in assignments().values() for p in ps) == list(range(PARTITIONS))
                and ledger.commits_acked > 0, "the group's initial join and a first commit")
    _until(lambda: _offsets_isr(zk, chroot) == [{1, 2, 3}] * OFFSETS_PARTITIONS, "the offsets topic fully in sync")
    with ledger.lock:
        joined = list(ledger.rebalances)
    fetcher = threading.Thread(target=_offset_fetcher, args=(bootstrap, ledger, stop_consuming), daemon=True)
    fetcher.start()

    moves = []
    for round_ in range(ROUNDS):
        coordinator = _coordinator(brokers)
        with ledger.lock:
            commits_before = ledger.commits_acked
        if round_ % 2 == 0:
            brokers[coordinator].kill()
        else:
            assert brokers[coordinator].stop() == 0  # SIGTERM: controlled shutdown
        moves.append(coordinator)
        _until(lambda: _coordinator(brokers) != coordinator, f"round {round_}: a coordinator other than {coordinator}")
        ledger.wait(lambda: ledger.commits_acked > commits_before + CONSUMERS,
                    f"round {round_}: commits acknowledged after the coordinator {coordinator} went")
        brokers[coordinator].start()
        _until(lambda: all(coordinator in isr for isr in _offsets_isr(zk, chroot)),
               f"round {round_}: broker {coordinator} back in the ISR of the offsets partitions")
        with ledger.lock:
            assert ledger.rebalances == joined, (f"round {round_}: a rebalance after moving the coordinator off "
                                                 f"{coordinator}; {ledger.summary()}")

    stop_producing.set()
    threads[0].join(WAIT_S * 5)
    assert not threads[0].is_alive() and not ledger.produce_errors, ledger.produce_errors[:3]
    ends = {p: 1 + max(o for q, o in ledger.produced if q == p) for p in range(PARTITIONS)}
    ledger.wait(lambda: all(ledger.acked.get(p) == end for p, end in ends.items()),
                "every record consumed and its offset committed")
    stop_consuming.set()
    for thread in [*threads[1:], fetcher]:
        thread.join(WAIT_S)
        assert not thread.is_alive()

    # No rebalance from any coordinator move (the consumers' close above comes after this list).
    assert ledger.rebalances[:len(joined)] == joined
    assert all(kind == "revoke" for _, kind, _ in ledger.rebalances[len(joined):]), ledger.rebalances
    assert ledger.fetches_checked > ROUNDS
    # Every acknowledged record consumed, nothing skipped, duplicates only after a failed commit.
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset in ledger.consumed:
        by_partition[partition].append(offset)
    for partition, end in ends.items():
        assert set(by_partition[partition]) == set(range(end)), f"partition {partition}: records skipped"
    assert {po for po in ledger.produced} <= set(ledger.consumed)
    if not ledger.commits_failed:
        assert len(ledger.consumed) == len(set(ledger.consumed)), "records read twice with no failed commit"
    # Lag 0: OffsetFetch answers the log end of every partition.
    checker = Consumer({"bootstrap.servers": bootstrap, "log_level": 0, "group.id": GROUP, "enable.auto.commit": False})
    committed = checker.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=WAIT_S)
    checker.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert len(moves) == ROUNDS
    assert not ledger.fetch_violations, ledger.fetch_violations[:3]
