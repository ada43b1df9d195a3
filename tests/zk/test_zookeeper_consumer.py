"""ZookeeperConsumer processes joining and leaving a group (one SIGKILLed): after each change every
partition is owned by exactly one live consumer, the owner znodes say so, and the assignment is
the range assignment of the live consumers."""

from __future__ import annotations

from collections import defaultdict

from tests.integration.clients import create_topic, produce_all
from tests.zk.consumer_process import ConsumerProcess, Journal, balanced, latest_assignments
from tidemark.consumer.assignment import range_assign

TOPIC, PARTITIONS = "zkc-t", 6
NAMES = [f"{TOPIC}/{p}" for p in range(PARTITIONS)]
CONFIG = {"auto.offset.reset": "smallest", "auto.commit.interval.ms": "200",
          # A SIGKILLed consumer's id and owners vanish when its session expires.
          "zookeeper.session.timeout.ms": "2000", "rebalance.max.retries": "50"}


def owner_znodes(zk, group: str) -> dict[str, str]:
    root = f"/consumers/{group}/owners/{TOPIC}"
    return {f"{TOPIC}/{p}": zk.get(f"{root}/{p}")[0].decode() for p in zk.get_children(root)}


def settle(journal: Journal, zk, group: str, live: list[ConsumerProcess]) -> None:
    journal.wait_for(lambda: balanced(journal, live, NAMES), f"{len(live)} consumers balanced")
    ids = sorted(c.consumer_id for c in live)
    assert sorted(zk.get_children(f"/consumers/{group}/ids")) == ids
    expected = range_assign({TOPIC: list(range(PARTITIONS))}, {i: {TOPIC: 1} for i in ids})
    # Exactly one live owner per partition, in ZooKeeper and in the consumers' own view.
    assert owner_znodes(zk, group) == {f"{t}/{p}": thread for (t, p), thread in expected.items()}
    for consumer_id, event in latest_assignments(journal, live).items():
        assert sorted(event["partitions"]) == sorted(
            f"{t}/{p}" for (t, p), thread in expected.items() if thread == f"{consumer_id}-0")


def test_joins_leaves_and_a_sigkill_end_with_each_partition_owned_by_one_live_consumer(
        zookeeper, zk, make_broker, tmp_path) -> None:
    broker = make_broker({"offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    group = "zkc-group"
    journal = Journal()

    def consumer() -> ConsumerProcess:
        return ConsumerProcess(journal, zookeeper.connect, broker.bootstrap, group, TOPIC, CONFIG, tmp_path).start()

    started: list[ConsumerProcess] = []
    try:
        first = consumer()
        started.append(first)
        live = [first]
        settle(journal, zk, group, live)

        for _ in range(2):
            started.append(consumer())
            live.append(started[-1])
        settle(journal, zk, group, live)

        victim = live[1]
        victim.kill()  # no release, no deregistration: ZooKeeper expires its session
        live.remove(victim)
        settle(journal, zk, group, live)

        started.append(consumer())
        live.append(started[-1])
        settle(journal, zk, group, live)

        leaver = live.pop(0)
        leaver.terminate()
        settle(journal, zk, group, live)

        # The survivors consume what is produced now, each from the partitions it owns.
        produce_all(broker.bootstrap, TOPIC, [(p, None, b"v%d" % p) for p in range(PARTITIONS) for _ in range(3)])
        owner = {p: cid for cid, e in latest_assignments(journal, live).items() for p in e["partitions"]}
        last_assigned = len(journal.of("assigned"))

        def read_all() -> bool:
            return {f"{r['topic']}/{r['partition']}" for r in journal.of("record") if r["offset"] >= 0} == set(NAMES)
        journal.wait_for(read_all, "every partition read")
        assert len(journal.of("assigned")) == last_assigned  # no rebalance meanwhile
        readers: dict[str, set[str]] = defaultdict(set)
        for record in journal.of("record"):
            readers[f"{record['topic']}/{record['partition']}"].add(record["consumer_id"])
        assert readers == {name: {owner[name]} for name in NAMES}
    finally:
        for process in started:
            process.kill()
