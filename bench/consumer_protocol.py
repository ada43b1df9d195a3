"""KIP-848 against the classic protocol: a member joining, and heartbeat cost.

    python -m bench.consumer_protocol [--repeats 3] [--members 10000] [--groups 1000]

(a) Join: three confluent-kafka consumers hold a 60-partition topic while a producer writes to
    it; a fourth subscribes. Measured: from its subscribe() to the moment the four report (through
    their rebalance callbacks) 15 partitions each, every partition held by exactly one. Each
    member commits its position synchronously in on_revoke, so no record is processed twice;
    the run counts records consumed by two members (duplicates) to show it. Classic: eager
    `range` (partition.assignment.strategy=range), heartbeat.interval.ms=500, session 6000;
    consumer: group.protocol=consumer, group.remote.assignor=uniform, the broker's
    group.consumer.heartbeat.interval.ms=500 (its minimum lowered: both protocols act on a
    heartbeat, so both get the same interval). The two alternate, --repeats times each.
(b) Heartbeat cost: one coordinator shard in-process (no network, no log: records replayed as
    the runtime replays them), --members members in --groups groups of the same size on a
    12-partition topic, all stable; then every member heartbeats once, as a steady-state member
    does every interval. Measured: CPU time per heartbeat, and what that is per member per
    second at Kafka's default 5 s interval.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import BrokerProcess  # noqa: E402
from tidemark.coordinator.consumer_group.heartbeat import ConsumerGroupConfig  # noqa: E402
from tidemark.coordinator.shard import CoordinatorConfig, GroupCoordinatorShard  # noqa: E402
from tidemark.records.consumer_group_schema import TopicMetadata  # noqa: E402

PARTITIONS = 60
BOUND_S = 120.0
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4",
            "group.consumer.heartbeat.interval.ms": "500", "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.session.timeout.ms": "6000", "group.consumer.min.session.timeout.ms": "6000"}


class Member:
    """A consumer polled in its own thread; ownership and records go to shared logs."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, protocol: str, shared: dict) -> None:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"}
        if protocol == "classic":
            config.update({"partition.assignment.strategy": "range", "heartbeat.interval.ms": 500,
                           "session.timeout.ms": 6000})
        else:
            config.update({"group.protocol": "consumer", "group.remote.assignor": "uniform"})
        self.name, self.shared = name, shared
        self.held: set[int] = set()
        self.consumer = Consumer(config)
        self.stop = threading.Event()
        self.topic = topic
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.consumer.subscribe([self.topic], on_assign=self._assign, on_revoke=self._revoke, on_lost=self._lost)
        self.thread.start()

    def _assign(self, consumer, partitions) -> None:
        self.shared["events"].append((time.monotonic(), self.name, "assign", sorted(p.partition for p in partitions)))
        with self.shared["lock"]:
            for p in partitions:
                owner = self.shared["owner"].get(p.partition)
                if owner is not None and owner != self.name:
                    self.shared["overlaps"] += 1
                self.shared["owner"][p.partition] = self.name
            self.held |= {p.partition for p in partitions}

    def _revoke(self, consumer, partitions) -> None:
        self.shared["events"].append((time.monotonic(), self.name, "revoke", sorted(p.partition for p in partitions)))
        try:
            consumer.commit(asynchronous=False)  # what was processed, before letting go
        except Exception as exc:  # noqa: BLE001 - nothing consumed yet: nothing to commit
            self.shared["events"].append((time.monotonic(), self.name, "commit failed", str(exc)))
        with self.shared["lock"]:
            for p in partitions:
                if self.shared["owner"].get(p.partition) == self.name:
                    del self.shared["owner"][p.partition]
            self.held -= {p.partition for p in partitions}

    _lost = _revoke

    def _run(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.1)
            if message is None or message.error():
                continue
            key = (message.partition(), message.offset())
            with self.shared["lock"]:
                self.shared["seen"][key] = self.shared["seen"].get(key, 0) + 1
                self.shared["by"].setdefault(key, []).append((self.name, time.monotonic()))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(BOUND_S)
        self.consumer.close()


def _wait(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _balanced(members: list[Member], share: int) -> bool:
    held = [set(m.held) for m in members]
    return all(len(h) == share for h in held) and len(set().union(*held)) == PARTITIONS


def join_once(bootstrap: str, protocol: str, run: int) -> tuple[float, int]:
    topic, group = f"join-{protocol}-{run}", f"join-{protocol}-{run}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    shared: dict = {"lock": threading.Lock(), "owner": {}, "seen": {}, "overlaps": 0, "by": {}, "events": []}
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        i = 0
        while not stop.is_set():
            producer.produce(topic, value=b"%d" % i, partition=i % PARTITIONS)
            i += 1
            if i % 600 == 0:
                producer.flush(30)
                time.sleep(0.02)
        producer.flush(30)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    members = [Member(n, bootstrap, group, topic, protocol, shared) for n in "abc"]
    try:
        for m in members:
            m.start()
        _wait(lambda: _balanced(members, 20), "three members with 20 partitions each")
        fourth = Member("d", bootstrap, group, topic, protocol, shared)
        members.append(fourth)
        start = time.monotonic()
        fourth.start()
        _wait(lambda: _balanced(members, 15), "four members with 15 partitions each")
        elapsed = time.monotonic() - start
        time.sleep(1.0)  # let records flow through the new owners before counting duplicates
    finally:
        stop.set()
        producer.join(BOUND_S)
        for m in members:
            m.close()
    duplicates = sum(1 for count in shared["seen"].values() if count > 1)
    if duplicates or shared["overlaps"]:
        print(f"  {shared['overlaps']} partitions assigned while another member held them, {duplicates} records "
              f"processed twice; the members' events:")
        for event in shared["events"]:
            print("   ", event)
    return elapsed, duplicates + shared["overlaps"]


def heartbeat_cost(members: int, groups: int) -> tuple[float, int]:
    """CPU µs per steady-state heartbeat, and the records they wrote (0 expected)."""
    from kio.index import load_request_schema

    from tidemark.wire.build import build

    shard = GroupCoordinatorShard(0, CoordinatorConfig(consumer=ConsumerGroupConfig()), lambda t, p: True)
    topic = TopicMetadata(uuid.uuid4(), "topic", 12)
    topics = {topic.name: topic}
    schema = load_request_schema(68, 1)
    offset = [0]

    def beat(group: str, member: str, epoch: int, owned) -> dict:
        request = build(schema, {
            "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 30000 if epoch == 0 else -1,
            "subscribed_topic_names": ["topic"] if epoch == 0 else None, "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [] if epoch == 0 else None if owned is None else
            [{"topic_id": t, "partitions": ps} for t, ps in owned.items()]})
        result = shard.consumer.heartbeat(request, 1, 1, 0, topics, "c", "/h")
        for record in result.records:
            shard.replay_appended(offset[0], record, now_ms=0)
            shard.replay(offset[0], record.key, record.value, now_ms=0, decoded=record.decoded)
            offset[0] += 1
        return result.responses[1]

    per_group = members // groups
    state: dict[tuple[str, str], tuple[int, dict]] = {}
    for g in range(groups):
        for m in range(per_group):
            r = beat(f"g{g}", f"m{m}", 0, {})
            state[(f"g{g}", f"m{m}")] = (r["member_epoch"], {})
    for _ in range(20):  # reconcile to stable: confirm, revoke, then take
        if all(group.state == "Stable" for group in shard.consumer_groups.latest.values()):
            break
        for (group, member), (epoch, owned) in list(state.items()):
            r = beat(group, member, epoch, owned)
            if r["assignment"] is not None:
                owned = {tp["topic_id"]: list(tp["partitions"]) for tp in r["assignment"]["topic_partitions"]}
            state[(group, member)] = (r["member_epoch"], owned)
    assert all(group.state == "Stable" for group in shard.consumer_groups.latest.values())
    # The requests are decoded before the clock starts: only the coordinator's work is timed.
    requests = [build(schema, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": None, "rack_id": None,
        "rebalance_timeout": -1, "subscribed_topic_names": None, "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": None}) for (group, member), (epoch, _) in state.items()]
    heartbeat, written = shard.consumer.heartbeat, 0
    started = time.process_time()
    for request in requests:
        result = heartbeat(request, 1, 1, 0, topics, "c", "/h")
        written += len(result.records)
    cpu = time.process_time() - started
    assert all(r.member_epoch >= 1 for r in requests)
    return cpu / len(requests) * 1e6, written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=1_000)
    parser.add_argument("--skip", choices=["join", "heartbeat"], action="append", default=[])
    parser.add_argument("--protocols", nargs="+", default=["classic", "consumer"])
    args = parser.parse_args(argv)
    if "join" not in args.skip:
        with tempfile.TemporaryDirectory() as tmp:
            broker = BrokerProcess(Path(tmp) / "data", SETTINGS).start()
            try:
                times: dict[str, list[float]] = {p: [] for p in args.protocols}
                for run in range(args.repeats):
                    for protocol in args.protocols:
                        elapsed, duplicates = join_once(broker.bootstrap, protocol, run)
                        times[protocol].append(elapsed)
                        print(f"join {protocol:8} run {run}: {elapsed * 1000:7.0f} ms to balance, "
                              f"{duplicates} records processed twice", flush=True)
                for protocol, values in times.items():
                    print(f"join {protocol:8} median {statistics.median(values) * 1000:7.0f} ms "
                          f"(min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})")
            finally:
                broker.stop()
                broker.kill()
    if "heartbeat" not in args.skip:
        micros, written = heartbeat_cost(args.members, args.groups)
        print(f"heartbeat: {args.members} members in {args.groups} groups: {micros:.1f} µs CPU per heartbeat "
              f"({micros / 5:.1f} µs per member per second at a 5 s interval), {written} records written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
