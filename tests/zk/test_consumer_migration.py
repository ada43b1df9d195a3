"""Seed 002's migration of a ZooKeeper consumer group to Kafka-stored offsets, and its roll back,
as written: three ZookeeperConsumer processes read a topic that is produced to throughout, and
each setting change is a rolling bounce (one consumer at a time, SIGTERM then restart).

At every step every partition resumes at the offset its group last committed, whichever store
that commit went to: no record is skipped, and none is read twice (a SIGTERMed consumer commits
before it lets its partitions go, so there is no uncommitted tail).

Each bounce lets the group settle on the two consumers left before the third comes back, and the
bounced consumer rejoins with a consumer.id that sorts between those two: the next bounce then
hands one of its partitions, with fresh commits, to a consumer still on the old settings. So
partitions change hands in both directions, old to new and new to old, at every step: the
handovers dual commit is there for."""

from __future__ import annotations

from collections import defaultdict

from tests.integration.clients import create_topic, produce_all
from tests.zk.test_migrate_offsets import kafka_committed
from tests.zk.consumer_process import ConsumerProcess, Journal, balanced

TOPIC, PARTITIONS, GROUP = "zkm-t", 6, "zkm-group"
NAMES = [f"{TOPIC}/{p}" for p in range(PARTITIONS)]
COMMON = {"auto.offset.reset": "smallest", "auto.commit.interval.ms": "100", "zookeeper.session.timeout.ms": "4000",
          "rebalance.max.retries": "50", "rebalance.backoff.ms": "1000"}
# The seed's steps: where the group starts, then each setting change done by a rolling bounce.
START = {"offsets.storage": "zookeeper", "dual.commit.enabled": "false"}
STEPS = [
    {"offsets.storage": "kafka", "dual.commit.enabled": "true"},
    {"offsets.storage": "kafka", "dual.commit.enabled": "false"},
    # Roll back: the same two steps with offsets.storage=zookeeper.
    {"offsets.storage": "zookeeper", "dual.commit.enabled": "true"},
    {"offsets.storage": "zookeeper", "dual.commit.enabled": "false"},
]
BATCH = 30  # records produced while each consumer bounces


def check_resumes(journal: Journal) -> None:
    """Each assignment started every partition at the last offset committed for it before."""
    commits: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for event in journal.of("committed"):
        for name, offset in event["offsets"].items():
            commits[name].append((event["at"], offset))
    for event in journal.of("assigned"):
        for name, offset in event["partitions"].items():
            before = [o for at, o in sorted(commits[name]) if at < event["at"]]
            assert offset == (before[-1] if before else 0), (name, offset, before[-3:], event["consumer_id"])


def test_rolling_bounces_to_kafka_storage_and_back_resume_at_the_last_commit(zookeeper, zk, make_broker,
                                                                             tmp_path) -> None:
    broker = make_broker({"offsets.topic.num.partitions": "3"}).start()
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    journal = Journal()
    produced = [0] * PARTITIONS

    def produce() -> None:
        messages = [(i % PARTITIONS, None, b"r%d" % i) for i in range(sum(produced), sum(produced) + BATCH)]
        produce_all(broker.bootstrap, TOPIC, messages)
        for partition, _, _ in messages:
            produced[partition] += 1

    def read_everything() -> bool:
        ends: dict[int, int] = defaultdict(int)
        for r in journal.of("record"):
            ends[r["partition"]] = max(ends[r["partition"]], r["offset"] + 1)
        return all(ends[p] == produced[p] for p in range(PARTITIONS))

    def all_committed() -> bool:
        last: dict[str, tuple[float, int]] = {}
        for event in journal.of("committed"):
            for name, offset in event["offsets"].items():
                last[name] = max(last.get(name, (0.0, 0)), (event["at"], offset))
        return all(last.get(f"{TOPIC}/{p}", (0, 0))[1] == produced[p] for p in range(PARTITIONS))

    def consumer(settings: dict[str, str], rank: float) -> ConsumerProcess:
        return ConsumerProcess(journal, zookeeper.connect, broker.bootstrap, GROUP, TOPIC,
                               {**COMMON, **settings, "consumer.id": f"c{rank:012.6f}"}, tmp_path).start()

    def rank_of(process: ConsumerProcess) -> float:
        return float(process.consumer_id[1:])

    def settled(members: list[ConsumerProcess], what: str) -> None:
        journal.wait_for(lambda: balanced(journal, members, NAMES) and read_everything() and all_committed(), what)

    live: list[ConsumerProcess] = []
    try:
        produce()
        live = [consumer(START, rank) for rank in (100.0, 200.0, 300.0)]
        settled(live, "start")
        for number, settings in enumerate(STEPS):
            for i in range(len(live)):
                live[i].terminate()
                rest = [c for c in live if c is not live[i]]
                produce()  # read by the two left, which take the bounced one's partitions
                settled(rest, f"step {number}: bounce {i}, two left")
                low, high = sorted(rank_of(c) for c in rest)
                live[i] = consumer(settings, (low + high) / 2)
                journal.wait_for(lambda: balanced(journal, live, NAMES), f"step {number}: bounce {i}, rebalanced")
                produce()  # read and committed by the three, the new one among them
                settled(live, f"step {number}: bounce {i}, back to three")
            check_resumes(journal)
            if number == 1:
                # Kafka-only commits went through the broker and left ZooKeeper behind: the roll
                # back must read both stores.
                assert kafka_committed(broker, GROUP) == {(TOPIC, p): produced[p] for p in range(PARTITIONS)}
                zk_offsets = [int(zk.get(f"/consumers/{GROUP}/offsets/{TOPIC}/{p}")[0]) for p in range(PARTITIONS)]
                assert zk_offsets != produced
    finally:
        for process in live:
            process.kill()

    seen: dict[int, list[int]] = defaultdict(list)
    for r in journal.of("record"):
        seen[r["partition"]].append(r["offset"])
    # Nothing skipped, nothing read twice.
    assert {p: sorted(offsets) for p, offsets in seen.items()} == {p: list(range(produced[p])) for p in range(PARTITIONS)}
