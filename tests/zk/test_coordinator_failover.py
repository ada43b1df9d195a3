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

import threading
from collections import defaultdict

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from tests.integration.raw import RawClient

from tests.zk.chaos_checks import (Ledger, Workload, offsetless_acks_missing, run_consumer, run_offset_fetcher,
                                   run_producer)
from tests.zk.test_cluster_brokers import WAIT_S, _bootstrap, _cluster, _metadata, _until, _zk_isr

ROUNDS = 10  # coordinator moves: even rounds SIGKILL, odd rounds SIGTERM
TOPIC = "orders"
PARTITIONS = 6
GROUP = "validation"
CONSUMERS = 3
OFFSETS_TOPIC = "__consumer_offsets"
FIND_COORDINATOR = 10
OFFSETS_PARTITIONS = 3  # _cluster's offsets.topic.num.partitions


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
    workload = Workload(bootstrap, TOPIC, PARTITIONS, GROUP)
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    threads = [threading.Thread(target=run_producer, args=(workload, ledger, stop_producing), daemon=True)]
    threads += [threading.Thread(target=run_consumer, args=(m, workload, ledger, stop_consuming), daemon=True)
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
    fetcher = threading.Thread(target=run_offset_fetcher, args=(workload, ledger, stop_consuming), daemon=True)
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
    assert not offsetless_acks_missing(ledger, ledger.consumed_values)  # librdkafka's acks without an offset
    if not ledger.commits_failed:
        assert len(ledger.consumed) == len(set(ledger.consumed)), "records read twice with no failed commit"
    # Lag 0: OffsetFetch answers the log end of every partition.
    checker = Consumer({"bootstrap.servers": bootstrap, "log_level": 0, "group.id": GROUP, "enable.auto.commit": False})
    committed = checker.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=WAIT_S)
    checker.close()
    assert {tp.partition: tp.offset for tp in committed} == ends
    assert len(moves) == ROUNDS
    assert not ledger.fetch_violations, ledger.fetch_violations[:3]
