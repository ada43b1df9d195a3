"""Chaos beyond kills: three brokers on ZooKeeper, a 3-partition RF=3 topic with
min.insync.replicas=2 written by an idempotent acks=all producer and read by a consumer group
committing after every batch (tests/zk/chaos_checks.py), through seeded rounds of

- process faults: preferred-leader elections with a follower (or the preferred replica itself)
  SIGSTOPped across them, a follower paused while its leader is SIGKILLed, ZooKeeper paused and
  resumed, the controller SIGKILLed;
- network faults between brokers (tests/fault_proxy.py, each broker advertising its proxy through
  advertised.listeners, and reaching ZooKeeper through one): a leader cut off from its followers,
  fetch answers lost, slow links, a broker cut off from ZooKeeper, a follower cut off while its
  leader is killed.

After every round the cluster must heal by itself (every replica back in the ISR within 90 s,
the producer acknowledged again). At the end: every acknowledged record is read back at its
offset, no offset holds two records, OffsetFetch never answered less than the last acknowledged
commit and ends at the log end, the replicas' logs are identical (read offline from their
segment files), and librdkafka reported no fatal error.

Any violation fails the test, an OffsetFetch answered below an acknowledged commit too (found
here: a coordinator that lost its ZooKeeper session served from its cache; it is now fenced by
its session's lease, tests/zk/test_coordinator_session_fence.py).

Each run draws its schedule (which fault, on whom, for how long) from a seed it prints; set
TIDEMARK_CHAOS_SEED to replay a schedule (the machine's timing is not replayed). Fault time is
bounded (ROUNDS rounds of at most MAX_HOLD_S each), every process is ended by its pid.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kazoo.client import KazooClient

from tests.conftest import free_port
from tests.fault_proxy import BLACKHOLE, DROP, RESPONSES, Delay, FaultProxy
from tests.zk.chaos_checks import (
    WAIT_S,
    BoundedWaits,
    Ledger,
    Workload,
    log_ends,
    lost_writes,
    offsetless_acks_missing,
    read_back,
    replica_divergence,
    run_consumer,
    run_offset_fetcher,
    run_producer,
)
from tidemark.cluster.zk.preferred_election import request_preferred_election

TOPIC = "orders"
PARTITIONS = 3
OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_PARTITIONS = 3
CONSUMERS = 2
PRODUCERS = (("idempotent", True), ("plain", False))  # (name, enable.idempotence)
BROKERS = (1, 2, 3)
ROUNDS = 5
MAX_HOLD_S = 9.0  # one fault's length at most: ROUNDS * MAX_HOLD_S <= 90 s of faults per run
STOP_S = 45  # controlled.shutdown.timeout.ms (15 s) + issue 23's bound (5 s), and room on a busy machine
RECOVERY_S = 90.0  # a cluster not healed this long after a fault is a failure (issue 23, defect 10)
SESSION_TIMEOUT_MS = 6000  # pauses and cuts of up to MAX_HOLD_S cross it, shorter ones do not
SETTINGS = {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "replica.lag.time.max.ms": "4000",
            "replica.fetch.wait.max.ms": "100", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0", "controlled.shutdown.timeout.ms": "15000"}


def _seed() -> int:
    seed = int(os.environ.get("TIDEMARK_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed {seed} (replay the schedule: TIDEMARK_CHAOS_SEED={seed})")
    return seed


class Chaos(BoundedWaits):
    """The cluster under test, what was done to it, and what went wrong."""

    def __init__(self, make_broker, zookeeper, zk, chroot: str, seed: int, proxy: FaultProxy | None = None) -> None:
        self.zookeeper, self.zk, self.proxy = zookeeper, zk, proxy
        self.root = "/" + chroot.split("/", 1)[1]
        self.seed = seed
        self.rng = random.Random(seed)
        self.events: list[str] = []  # the schedule as it ran, for the failure message
        self.violations: list[str] = []
        self.brokers = {}
        self._chrooted: KazooClient | None = None
        self.ledger: Ledger | None = None  # told what the test is doing, for its violations
        self.started = time.monotonic()
        self.recovery_failed = False  # an ISR did not heal after a round: the rounds stopped there
        self.zk_fronts: dict[int, int] = {}
        for broker_id in BROKERS:
            port = free_port()
            settings = {**SETTINGS, "broker.id": str(broker_id), "zookeeper.connect": chroot}
            if proxy is not None:  # other brokers (and clients) reach it through the proxy; it reaches ZooKeeper so too
                settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.front(broker_id, port)}"
                front = proxy.front(("zookeeper", broker_id), zookeeper.port, source=broker_id)
                settings["zookeeper.connect"] = f"127.0.0.1:{front}{self.root}"
            self.brokers[broker_id] = make_broker(settings, port=port)
        for broker in self.brokers.values():
            broker.start()
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())

    # -- what ZooKeeper holds: the cluster's decisions, not a broker's cached view --------------------

    def state(self, topic: str, partition: int) -> dict:
        data, _ = self.zk.get(f"{self.root}/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def replicas(self, topic: str, partition: int) -> list[int]:
        data, _ = self.zk.get(f"{self.root}/brokers/topics/{topic}")
        return json.loads(data)["partitions"][str(partition)]

    def controller(self) -> int:
        try:
            data, _ = self.zk.get(f"{self.root}/controller")
        except Exception:  # noqa: BLE001 - no controller right now
            return -1
        return json.loads(data)["brokerid"]

    def all_partitions(self) -> list[tuple[str, int]]:
        return [(TOPIC, p) for p in range(PARTITIONS)] + [(OFFSETS_TOPIC, p) for p in range(OFFSETS_PARTITIONS)]

    def out_of_sync(self) -> list[str]:
        """The partitions not led with every replica in sync, as ZooKeeper holds them."""
        found = []
        for topic, partition in self.all_partitions():
            try:
                state = self.state(topic, partition)
            except Exception as exc:  # noqa: BLE001 - not created yet, or ZooKeeper not answering
                found.append(f"{topic}-{partition}: {exc!r}")
                continue
            if sorted(state["isr"]) != list(BROKERS) or state["leader"] not in BROKERS:
                found.append(f"{topic}-{partition}: leader {state['leader']} epoch {state['leader_epoch']} "
                             f"isr {state['isr']}")
        return found

    def fully_in_sync(self) -> bool:
        try:
            return all(sorted(self.state(t, p)["isr"]) == list(BROKERS) and self.state(t, p)["leader"] in BROKERS
                       for t, p in self.all_partitions())
        except Exception:  # noqa: BLE001 - not created yet, or ZooKeeper not answering: not yet
            return False

    # -- bounded waits --------------------------------------------------------------------------------

    def until(self, condition: Callable[[], bool], what: str, bound_s: float = RECOVERY_S) -> bool:
        return super().until(condition, what, bound_s)

    def note(self, text: str) -> None:
        text = f"{time.monotonic() - self.started:.1f}s {text}"
        self.events.append(text)
        if self.ledger is not None:
            with self.ledger.lock:
                self.ledger.phase = text
        print(f"chaos: {text}", flush=True)

    def hold(self) -> float:
        return round(self.rng.uniform(1.0, MAX_HOLD_S), 2)

    def sigterm(self, broker_id: int) -> None:
        """A clean shutdown; one that does not end (issue 23, defect 4) is a violation, then a kill."""
        try:
            if self.brokers[broker_id].stop(timeout=STOP_S) != 0:
                self.violate(f"broker {broker_id} exited non-zero after SIGTERM")
        except subprocess.TimeoutExpired:
            self.violate(f"broker {broker_id} still running {STOP_S}s after SIGTERM")
            self.brokers[broker_id].kill()

    def chrooted(self) -> KazooClient:
        """A client inside the cluster's chroot (the preferred election's znode is relative to it)."""
        if self._chrooted is None:
            self._chrooted = KazooClient(hosts=self.zookeeper.connect + self.root, timeout=30.0)
            self._chrooted.start(timeout=WAIT_S)
        return self._chrooted

    def close(self) -> None:
        if self._chrooted is not None:
            self._chrooted.stop()
            self._chrooted.close()

    def report(self) -> str:
        return f"seed {self.seed}; schedule: {self.events}; violations: {self.violations}"


# -- process faults ---------------------------------------------------------------------------------

def bounce_then_elect_preferred_with_a_pause(c: Chaos) -> None:
    """A controlled shutdown moves leaderships off a broker; back and in sync, a preferred
    election moves them back while a broker is SIGSTOPped: the preferred replica itself (it is
    made leader while it cannot act: issue 23's defect 1) or another follower."""
    bounced = c.rng.choice(BROKERS)
    c.note(f"SIGTERM broker {bounced}, restart")
    c.sigterm(bounced)
    c.brokers[bounced].start()
    if not c.until(c.fully_in_sync, f"broker {bounced} back in every ISR"):
        return
    controller = c.controller()
    candidates = [b for b in BROKERS if b != controller]  # the controller must act on the election
    paused = bounced if bounced in candidates and c.rng.random() < 0.5 else c.rng.choice(candidates)
    # Paused a while (within replica.lag.time.max.ms: still in the ISR) before the election, so
    # that acks=all produces wait on it when the leadership moves.
    before, hold = round(c.rng.uniform(0.5, 3.0), 2), c.hold()
    c.note(f"SIGSTOP broker {paused} (controller {controller}); preferred election after {before}s; hold {hold}s")
    c.brokers[paused].pause()
    try:
        time.sleep(before)
        if not request_preferred_election(c.chrooted(), c.all_partitions(), WAIT_S):
            c.note("preferred election not handled in time")
        time.sleep(hold)  # the fault's length, drawn from the seed: nothing is asserted on it
    finally:
        c.brokers[paused].resume()
        c.note(f"SIGCONT broker {paused}")


def pause_a_follower_and_kill_its_leader(c: Chaos) -> None:
    """A follower in the ISR is paused, then its leader killed: the controller may elect the
    paused follower, which leads only once it runs again."""
    partition = c.rng.randrange(PARTITIONS)
    state = c.state(TOPIC, partition)
    leader = state["leader"]
    follower = c.rng.choice([b for b in state["isr"] if b != leader])
    hold = c.hold()
    c.note(f"{TOPIC}-{partition}: SIGSTOP follower {follower}, SIGKILL leader {leader}; hold {hold}s")
    c.brokers[follower].pause()
    try:
        c.brokers[leader].kill()
        time.sleep(hold)
    finally:
        c.brokers[follower].resume()
        c.note(f"SIGCONT broker {follower}, restart broker {leader}")
        c.brokers[leader].start()


def pause_zookeeper(c: Chaos) -> None:
    hold = c.hold()
    c.note(f"SIGSTOP ZooKeeper; hold {hold}s (session timeout {SESSION_TIMEOUT_MS} ms)")
    c.zookeeper.pause()
    try:
        time.sleep(hold)
    finally:
        c.zookeeper.resume()
        c.note("SIGCONT ZooKeeper")


def kill_the_controller(c: Chaos) -> None:
    controller = c.controller()
    if controller not in BROKERS:
        c.note("no controller to kill")
        return
    c.note(f"SIGKILL controller {controller}")
    c.brokers[controller].kill()
    c.until(lambda: c.controller() not in (-1, controller), f"a controller other than {controller}")
    c.note(f"restart broker {controller}")
    c.brokers[controller].start()


PROCESS_FAULTS = (bounce_then_elect_preferred_with_a_pause, pause_a_follower_and_kill_its_leader,
                  pause_zookeeper, kill_the_controller)


# -- network faults ---------------------------------------------------------------------------------

def isolate_a_leader_from_its_followers(c: Chaos) -> None:
    """Followers' fetches to one leader go nowhere (it keeps ZooKeeper and its clients): it
    shrinks its ISR to itself, and acks=all waits (min.insync.replicas=2) until the heal."""
    partition = c.rng.randrange(PARTITIONS)
    leader = c.state(TOPIC, partition)["leader"]
    hold = c.hold()
    c.note(f"blackhole followers <-> leader {leader} (of {TOPIC}-{partition}); hold {hold}s")
    for follower in BROKERS:
        if follower != leader:
            c.proxy.set_both(follower, leader, BLACKHOLE)
    time.sleep(hold)
    c.proxy.heal()
    c.note("heal")


def lose_fetch_answers(c: Chaos) -> None:
    """A follower's fetches reach the leader (which records its position) but their answers
    are lost: the connection closes instead."""
    partition = c.rng.randrange(PARTITIONS)
    leader = c.state(TOPIC, partition)["leader"]
    follower = c.rng.choice([b for b in BROKERS if b != leader])
    hold = c.hold()
    c.note(f"drop answers leader {leader} -> follower {follower}; hold {hold}s")
    c.proxy.set(follower, leader, RESPONSES, DROP)
    time.sleep(hold)
    c.proxy.heal()
    c.note("heal")


def slow_links(c: Chaos) -> None:
    delays = {(a, b): round(c.rng.uniform(0.05, 0.8), 3) for a in BROKERS for b in BROKERS if a != b}
    hold = c.hold()
    c.note(f"delay every inter-broker link {delays}; hold {hold}s")
    for (a, b), seconds in delays.items():
        c.proxy.set_both(a, b, Delay(seconds))
    time.sleep(hold)
    c.proxy.heal()
    c.note("heal")


def cut_a_broker_from_zookeeper(c: Chaos) -> None:
    """A broker keeps serving clients and followers but hears nothing from ZooKeeper: past its
    session timeout the cluster moves on without it."""
    broker = c.rng.choice(BROKERS)
    hold = c.hold()
    c.note(f"blackhole broker {broker} <-> ZooKeeper; hold {hold}s")
    c.proxy.set_both(broker, ("zookeeper", broker), BLACKHOLE)
    time.sleep(hold)
    c.proxy.heal()
    c.note("heal")


def cut_a_follower_off_and_kill_its_leader(c: Chaos) -> None:
    """A follower still in the ISR loses the other brokers, then its leader dies: it may be
    elected while nobody can fetch from it."""
    partition = c.rng.randrange(PARTITIONS)
    state = c.state(TOPIC, partition)
    leader = state["leader"]
    follower = c.rng.choice([b for b in state["isr"] if b != leader])
    hold = c.hold()
    c.note(f"{TOPIC}-{partition}: blackhole follower {follower} <-> brokers, SIGKILL leader {leader}; hold {hold}s")
    for other in BROKERS:
        if other != follower:
            c.proxy.set_both(follower, other, BLACKHOLE)
            c.proxy.set_both(other, follower, BLACKHOLE)
    c.brokers[leader].kill()
    time.sleep(hold)
    c.proxy.heal()
    c.note(f"heal, restart broker {leader}")
    c.brokers[leader].start()


NETWORK_FAULTS = (isolate_a_leader_from_its_followers, lose_fetch_answers, slow_links, cut_a_broker_from_zookeeper,
                  cut_a_follower_off_and_kill_its_leader)


# -- the run ----------------------------------------------------------------------------------------

def _sees_every_broker(broker) -> bool:
    try:
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - not answered in time on a busy machine: ask again
        return False
    return sorted(metadata.brokers) == list(BROKERS)


def run_chaos(c: Chaos, faults) -> None:
    # Each broker's view names all three before the topic is created (whichever broker the
    # admin client asks checks the replication factor against its own view).
    for broker in c.brokers.values():
        assert c.until(lambda: _sees_every_broker(broker), f"{broker.bootstrap} sees every broker", WAIT_S), c.report()
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(WAIT_S)
    workload = Workload(c.bootstrap, TOPIC, PARTITIONS, group="chaos", burst=10, pause_s=0.03)
    ledger = c.ledger = Ledger()
    stop_producing, stop_consuming = threading.Event(), threading.Event()
    # An idempotent producer and a plain acks=all one: a record acknowledged after it was
    # truncated away shows as the other's record at its offset (alone, an idempotent producer
    # would write the same record there again: its later batches wait on the lost one's sequence).
    producers = [threading.Thread(target=run_producer, args=(workload, ledger, stop_producing, name, idempotent),
                                  daemon=True) for name, idempotent in PRODUCERS]
    consumers = [threading.Thread(target=run_consumer, args=(m, workload, ledger, stop_consuming), daemon=True)
                 for m in range(CONSUMERS)]
    fetcher = threading.Thread(target=run_offset_fetcher, args=(workload, ledger, stop_consuming), daemon=True)
    try:
        for thread in [*producers, *consumers]:
            thread.start()
        ledger.wait(lambda: ledger.commits_acked > 0, "a first acknowledged commit")
        assert c.until(c.fully_in_sync, "every partition fully in sync at the start"), c.report()
        fetcher.start()

        for round_ in range(ROUNDS):
            fault = c.rng.choice(faults)
            c.note(f"round {round_}: {fault.__name__}")
            with ledger.lock:
                produced_before = len(ledger.produced)
            fault(c)
            if not c.until(c.fully_in_sync, f"round {round_}: every replica back in every ISR"):
                c.recovery_failed = True
                c.violate(f"out of sync: {c.out_of_sync()}; processes alive: "
                          f"{[i for i, b in c.brokers.items() if b.process.poll() is None]}")
                break
            if not c.until(lambda: len(ledger.produced) > produced_before + 50,
                           f"round {round_}: records acknowledged again", WAIT_S):
                break

        c.note("stop producing")
        stop_producing.set()
        for producer in producers:
            producer.join(WAIT_S * 5)
            if producer.is_alive():
                c.violate("a producer's records were not all acknowledged")
        ends = log_ends(ledger, PARTITIONS)
        c.until(lambda: all(ledger.acked.get(p, 0) >= end for p, end in ends.items()),
                f"every record consumed and committed up to {ends}")
        stop_consuming.set()
        for thread in [*consumers, fetcher]:
            thread.join(WAIT_S)
            if thread.is_alive():
                c.violate(f"{thread.name} did not stop")

        # Checked from the running cluster: every acknowledged record at its offset; the commits.
        records = read_back(workload, ends)
        lost = lost_writes(ledger, records)
        if lost:
            shown = [f"{key}: acknowledged {acked!r}, read {read!r}" for key, acked, read in lost[:5]]
            # Where replicas cut their logs tells an acknowledgement after a truncation (issue 23's
            # defect 1) from a wrong truncation (defect 2).
            c.violate(f"{len(lost)} acknowledged records not read back at their offset: {shown}; truncations "
                      f"logged: {_truncated_ranges(c)}")
        for missing in offsetless_acks_missing(ledger, records):
            c.violate(missing)
        committed = _committed(workload)
        if committed != ends:
            c.violate(f"OffsetFetch answers {committed}, the last acknowledged commits are {ledger.acked}")
        # The replicas, compared offline once in sync and stopped (SIGTERM, one at a time).
        if not c.recovery_failed:
            c.until(c.fully_in_sync, "every replica in sync at the end")
        for broker_id in c.brokers:
            c.sigterm(broker_id)
        data_dirs = {i: b.data_dir for i, b in c.brokers.items()}
        for topic, partitions in ((TOPIC, PARTITIONS), (OFFSETS_TOPIC, OFFSETS_PARTITIONS)):
            for problem in replica_divergence(data_dirs, topic, 3):
                c.violate(f"replicas differ: {problem}")
        with ledger.lock:
            for name, found in (("two records acknowledged at one offset", ledger.double_acks),
                                ("one offset read with two values", ledger.read_conflicts),
                                ("OffsetFetch below an acknowledged commit", ledger.fetch_violations),
                                ("librdkafka fatal error", ledger.fatal_errors),
                                ("delivery failed", ledger.produce_errors)):
                if found:
                    c.violate(f"{name}: {found[:3]}")
            summary = (f"acknowledged {len(ledger.produced)} records ({len(ledger.offsetless_acks)} more "
                       f"without an offset), {ledger.commits_acked} commits, "
                   f"{ledger.fetches_checked} OffsetFetch checks, {len(ledger.commits_failed)} failed commits")
        c.note(summary)
    finally:
        stop_producing.set()
        stop_consuming.set()
        c.close()
    assert not c.violations, c.report()


def _truncated_ranges(c: Chaos) -> dict[int, list[tuple[int, int]]]:
    """Per partition of the topic: the [to, from) offset ranges brokers' logs say they truncated."""
    ranges: dict[int, list[tuple[int, int]]] = {}
    for broker in c.brokers.values():
        for line in broker.log_text().splitlines():
            if '"follower_truncated"' not in line:
                continue
            event = json.loads(line)
            if event.get("topic") == TOPIC:
                ranges.setdefault(event["partition"], []).append((event["to_offset"], event["from_offset"]))
    return ranges


_COORDINATOR_MOVING = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
                       KafkaError.COORDINATOR_LOAD_IN_PROGRESS)


def _committed(workload: Workload) -> dict[int, int]:
    checker = Consumer({"bootstrap.servers": workload.bootstrap, "log_level": 0, "group.id": workload.group,
                        "enable.auto.commit": False})
    deadline = time.monotonic() + WAIT_S
    try:
        while True:
            try:
                answered = checker.committed([TopicPartition(workload.topic, p) for p in range(workload.partitions)],
                                             timeout=WAIT_S)
                break
            except KafkaException as exc:
                # The group's coordinator may still be moving after the last round: librdkafka
                # gives up on NOT_COORDINATOR here, where Kafka's clients find it again and retry.
                if exc.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # pacing only: the next answer decides
    finally:
        checker.close()
    return {tp.partition: tp.offset for tp in answered}


@pytest.fixture
def proxy():
    p = FaultProxy()
    yield p
    p.close()


def test_acknowledged_writes_and_commits_survive_elections_pauses_and_zookeeper_stalls(make_broker, zookeeper, zk,
                                                                                       chroot):
    chaos = Chaos(make_broker, zookeeper, zk, chroot, _seed())
    try:
        run_chaos(chaos, PROCESS_FAULTS)
    finally:
        zookeeper.resume()  # whatever happened, the module's ZooKeeper runs on


def test_acknowledged_writes_and_commits_survive_network_faults_between_brokers(make_broker, zookeeper, zk, chroot,
                                                                                proxy):
    run_chaos(Chaos(make_broker, zookeeper, zk, chroot, _seed(), proxy), NETWORK_FAULTS)
