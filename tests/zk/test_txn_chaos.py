"""Exactly-once under SIGKILL (issue 25's proof, Kafka's TransactionsTest invariant): three
brokers on ZooKeeper; two input topics pre-filled with unique records, each copied to its output
topic by transactional consume-transform-produce copiers (tests/zk/txn_copier.py, real
processes): two confluent-kafka group members with transactional ids of their own
(send_offsets_to_transaction with the group's metadata, KIP-447), and one aiokafka copier owning
its input's partitions. A seeded driver SIGKILLs, at random points of the copy, a copier (then
restarted with its transactional id), the transaction coordinator of a copier's id, a group's
coordinator, a partition leader or any broker (then restarted, and back in every ISR before the
next kill). Once per run a copier is made a zombie: held before a commit, SIGSTOPped, a
successor with its transactional id initialised, then resumed; its commit must fail as fenced.

At the end (the copy done, waited for on the groups' committed offsets): a read_committed
reader of each output sees every input value exactly once and no record of an aborted
transaction (the copiers abort some on purpose, and read_uncommitted shows those); the groups'
committed offsets are the inputs' ends; the zombie's records are never visible.

CI runs CI_SEEDS runs of CI_KILLS kills, each on its own seed. A long run:
`python -m tests.zk.test_txn_chaos --kills 300 --seed N` (or TIDEMARK_TXN_CHAOS_KILLS and
TIDEMARK_CHAOS_SEED under pytest). The seed, printed, replays the schedule (not the machine's
timing).

What it found: input records copied two and three times by the aiokafka copier after a group
coordinator moved. aiokafka's OffsetFetch (v2-v3) ignores the group-level error code, and a
broker that no longer leads the group's partition answers NOT_COORDINATOR with no partitions (as
Kafka does), so aiokafka read "nothing committed" and started over from offset 0. A client flaw,
not the broker's: the copier asks for its committed offsets through librdkafka.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tests.zk.chaos_checks import BoundedWaits
from tidemark.coordinator.partitioner import partition_for

BROKERS = (1, 2, 3)
PARTITIONS = 3
OFFSETS_PARTITIONS = 3
TXN_PARTITIONS = 3
WAIT_S = 60.0  # hang guard of one wait
RECOVERY_S = 90.0  # a cluster not back in sync this long after a kill is a failure (issue 23)
COPY_S = 300.0  # the copy's end after the last kill, on a loaded machine
SETTINGS = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "4000",
            "replica.fetch.wait.max.ms": "100", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "transaction.state.log.num.partitions": str(TXN_PARTITIONS), "group.initial.rebalance.delay.ms": "0",
            "controlled.shutdown.timeout.ms": "15000"}
FENCED = {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED"}
CI_SEEDS = 2
CI_KILLS = 10  # per seed
RECORDS_PER_KILL = 40  # input records per pipeline per kill: the copy goes on across the kills
# A long run's kills follow each other: the copy runs on through each broker's recovery (measured:
# about 200 records per input per kill), and with fewer records most kills would land after it.
LONG_RECORDS_PER_KILL = 200


@dataclass(frozen=True)
class Pipeline:
    name: str
    client: str
    copiers: int

    @property
    def input(self) -> str:
        return f"{self.name}-in"

    @property
    def output(self) -> str:
        return f"{self.name}-out"

    @property
    def group(self) -> str:
        return f"{self.name}-copiers"

    def transactional_id(self, slot: int) -> str:
        return f"{self.name}-copier-{slot}"


PIPELINES = (Pipeline("ck", "confluent", 2), Pipeline("aio", "aiokafka", 1))


class Copier:
    """One copier slot: its process (restarted under the same transactional id) and its lines."""

    def __init__(self, run: Run, pipeline: Pipeline, slot: int) -> None:
        self.run, self.pipeline, self.slot = run, pipeline, slot
        self.transactional_id = pipeline.transactional_id(slot)
        self.incarnation = 0
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []  # this incarnation's

    def start(self) -> subprocess.Popen[str]:
        self.incarnation += 1
        instance = f"{self.transactional_id}#{self.incarnation}"
        args = [sys.executable, "-m", "tests.zk.txn_copier", "--client", self.pipeline.client,
                "--bootstrap", self.run.bootstrap, "--transactional-id", self.transactional_id,
                "--group", self.pipeline.group, "--input", self.pipeline.input, "--output", self.pipeline.output,
                "--instance", instance, "--abort-percent", "10", "--seed", str(self.run.seed)]
        stderr = open(self.run.log_dir / f"{instance}.stderr", "ab")
        process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                   text=True, bufsize=1)
        stderr.close()
        self.process, lines = process, []
        self.lines = lines
        threading.Thread(target=self._read, args=(process, instance, lines), daemon=True).start()
        return process

    def _read(self, process: subprocess.Popen[str], instance: str, lines: list[str]) -> None:
        log = open(self.run.log_dir / f"{instance}.stdout", "a")
        for line in process.stdout:
            log.write(line)
            log.flush()
            line = line.strip()
            with self.run.changed:
                lines.append(line)
                words = line.split()
                if words and words[0] == "committed":
                    self.run.progress += int(words[1])
                elif words and words[0] == "aborted":
                    self.run.aborts += 1
                elif words and words[0] == "error":
                    self.run.copier_errors.append(f"{instance}: {line}")
                self.run.changed.notify_all()
        code = process.wait()
        with self.run.changed:
            self.run.exits.append((instance, code))
            self.run.changed.notify_all()
            crashed = process is self.process and not self.run.stopping
        if crashed:  # it ended by itself (an error it does not handle): restarted, as a crash
            self.run.note(f"copier {instance} exited with {code}: {lines[-1:]}; restart")
            self.start()

    def tell(self, process: subprocess.Popen[str], command: str) -> None:
        try:
            process.stdin.write(command + "\n")
            process.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it exited meanwhile: its exit is seen by the watchdog

    def kill(self) -> None:
        process, self.process = self.process, None  # not restarted by its reader: the caller decides
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=WAIT_S)


@dataclass
class Run(BoundedWaits):
    """The cluster, the copiers, what was done and what went wrong."""

    brokers: dict
    zk: KazooClient
    root: str
    seed: int
    records: int
    rng: random.Random = field(init=False)
    changed: threading.Condition = field(default_factory=threading.Condition)
    progress: int = 0  # records in transactions the copiers said were committed
    aborts: int = 0
    copier_errors: list[str] = field(default_factory=list)
    exits: list[tuple[str, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    kills: Counter = field(default_factory=Counter)
    copiers: list[Copier] = field(default_factory=list)
    strays: list[subprocess.Popen[str]] = field(default_factory=list)  # zombies, ended at the end
    total: int = 0  # records to copy, all inputs
    stopping: bool = False  # the copiers are told to stop: their exits are not crashes
    zombie: tuple[str, int] | None = None  # (instance, transaction number) never to be visible
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())
        self.log_dir = next(iter(self.brokers.values())).data_dir.parent  # the copiers' stderr, by the brokers' logs

    def note(self, text: str) -> None:
        text = f"{time.monotonic() - self.started:.1f}s {text}"
        self.events.append(text)
        print(f"txn chaos: {text}", flush=True)

    def until(self, condition: Callable[[], bool], what: str, bound_s: float = RECOVERY_S) -> bool:
        return super().until(condition, what, bound_s)

    def wait_event(self, predicate: Callable[[], bool], bound_s: float = WAIT_S) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, bound_s)

    def report(self) -> str:
        return (f"seed {self.seed}; schedule: {self.events}; violations: {self.violations}; "
                f"copier errors: {self.copier_errors[:10]}")

    # -- the cluster as ZooKeeper holds it ----------------------------------------------------------

    def state(self, topic: str, partition: int) -> dict:
        data, _ = self.zk.get(f"{self.root}/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def partitions(self) -> list[tuple[str, int]]:
        found = [(t, p) for pipe in PIPELINES for t in (pipe.input, pipe.output) for p in range(PARTITIONS)]
        found += [("__consumer_offsets", p) for p in range(OFFSETS_PARTITIONS)]
        if self.zk.exists(f"{self.root}/brokers/topics/__transaction_state"):
            found += [("__transaction_state", p) for p in range(TXN_PARTITIONS)]
        return found

    def fully_in_sync(self) -> bool:
        try:
            return all(sorted((s := self.state(t, p))["isr"]) == list(BROKERS) and s["leader"] in BROKERS
                       for t, p in self.partitions())
        except Exception:  # noqa: BLE001 - not created yet, or ZooKeeper busy: not yet
            return False


# -- the kills --------------------------------------------------------------------------------------

def kill_copier(run: Run) -> None:
    copier = run.rng.choice(run.copiers)
    run.note(f"SIGKILL copier {copier.transactional_id}#{copier.incarnation}, restart")
    copier.kill()
    copier.start()
    run.kills["copier"] += 1


def _kill_broker(run: Run, broker_id: int, why: str) -> None:
    run.note(f"SIGKILL broker {broker_id} ({why}), restart")
    run.brokers[broker_id].kill()
    run.brokers[broker_id].start()
    run.kills[why.split()[0]] += 1
    run.until(run.fully_in_sync, f"broker {broker_id} back in every ISR")


def kill_transaction_coordinator(run: Run) -> None:
    copier = run.rng.choice(run.copiers)
    partition = partition_for(copier.transactional_id, TXN_PARTITIONS)
    _kill_broker(run, run.state("__transaction_state", partition)["leader"],
                 f"transaction-coordinator of {copier.transactional_id}")


def kill_group_coordinator(run: Run) -> None:
    pipeline = run.rng.choice(PIPELINES)
    partition = partition_for(pipeline.group, OFFSETS_PARTITIONS)
    _kill_broker(run, run.state("__consumer_offsets", partition)["leader"], f"group-coordinator of {pipeline.group}")


def kill_partition_leader(run: Run) -> None:
    pipeline = run.rng.choice(PIPELINES)
    topic, partition = run.rng.choice((pipeline.input, pipeline.output)), run.rng.randrange(PARTITIONS)
    _kill_broker(run, run.state(topic, partition)["leader"], f"leader of {topic}-{partition}")


def kill_any_broker(run: Run) -> None:
    _kill_broker(run, run.rng.choice(BROKERS), "any broker")


KILLS = (kill_copier, kill_copier, kill_transaction_coordinator, kill_group_coordinator, kill_partition_leader,
         kill_any_broker)


def make_a_zombie(run: Run) -> bool:
    """A confluent copier held before its commit and SIGSTOPped; its successor (same
    transactional id) initialised; resumed, its commit must fail as fenced. False when the
    copier held exited first (tried again later)."""
    copier = run.rng.choice([c for c in run.copiers if c.pipeline.client == "confluent"])
    zombie, lines = copier.process, copier.lines
    if zombie is None or zombie.poll() is not None:
        return False
    run.note(f"hold copier {copier.transactional_id}#{copier.incarnation} before its next commit")
    copier.tell(zombie, "hold")
    if not run.wait_event(lambda: any(line.startswith("holding") for line in lines) or zombie.poll() is not None
                          or run.progress >= run.total):
        run.violate(f"{copier.transactional_id} did not hold: {lines[-3:]}")
        return True
    if not any(line.startswith("holding") for line in lines) and zombie.poll() is None:
        run.note("the copy ended before the copier held")
        return False
    if zombie.poll() is not None:  # crashed meanwhile: no zombie this time
        run.note("the copier to hold exited first")
        return False
    _, instance, seq = next(line for line in lines if line.startswith("holding")).split()
    run.zombie = (instance, int(seq))
    os.kill(zombie.pid, signal.SIGSTOP)
    run.note(f"SIGSTOP {instance} (transaction {seq} written, not committed); start its successor")
    with run.changed:
        copier.process = None  # neither killed nor restarted with the slot
        run.strays.append(zombie)
    successor = copier.start()
    successor_lines = copier.lines
    if not run.wait_event(lambda: "ready" in successor_lines or successor.poll() is not None):
        run.violate(f"the successor of {instance} did not initialise: {successor_lines[-3:]}")
    os.kill(zombie.pid, signal.SIGCONT)
    copier.tell(zombie, "go")
    run.note(f"SIGCONT {instance}, let it commit")
    if not run.wait_event(lambda: zombie.poll() is not None and any(
            line.startswith(("fenced", "zombie-committed", "error")) for line in lines)):
        run.violate(f"zombie {instance} did not answer: {lines[-3:]}")
        os.kill(zombie.pid, signal.SIGKILL)
        zombie.wait(WAIT_S)
        return True
    outcome = next(line for line in lines if line.startswith(("fenced", "zombie-committed", "error")))
    run.note(f"zombie {instance}: {outcome}")
    words = outcome.split()
    if words[0] != "fenced" or words[1] not in FENCED:
        run.violate(f"zombie {instance} was not fenced: {outcome}")
    return True


# -- the records ------------------------------------------------------------------------------------

def _sees_every_broker(broker) -> bool:
    try:
        metadata = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0}).list_topics(timeout=10)
    except Exception:  # noqa: BLE001 - not answered in time on a busy machine: ask again
        return False
    return sorted(metadata.brokers) == list(BROKERS)


def prefill(run: Run) -> dict[str, list[bytes]]:
    producer = Producer({"bootstrap.servers": run.bootstrap, "enable.idempotence": True, "acks": "all",
                         "log_level": 0, "linger.ms": 5})
    inputs = {}
    for pipeline in PIPELINES:
        values = [f"{pipeline.name}-{i}".encode() for i in range(run.records)]
        for i, value in enumerate(values):
            producer.produce(pipeline.input, value, key=value, partition=i % PARTITIONS)
            producer.poll(0)
        inputs[pipeline.name] = values
    assert producer.flush(WAIT_S) == 0, "the input was not all acknowledged"
    return inputs


def committed_offsets(run: Run, pipeline: Pipeline) -> dict[int, int]:
    """The group's committed offsets on its input, stable ones (librdkafka asks require_stable
    for a read_committed consumer: a transaction's offsets count once it completes)."""
    checker = Consumer({"bootstrap.servers": run.bootstrap, "group.id": pipeline.group, "log_level": 0,
                        "enable.auto.commit": False, "isolation.level": "read_committed"})
    try:
        answered = checker.committed([TopicPartition(pipeline.input, p) for p in range(PARTITIONS)], timeout=WAIT_S)
    finally:
        checker.close()
    return {tp.partition: tp.offset for tp in answered}


def read_output(run: Run, topic: str, isolation: str) -> list[tuple[int, int, bytes]]:
    """Every (partition, offset, value) of `topic` up to its end for `isolation` (the LSO for
    read_committed), read once from offset 0, in each partition's order."""
    consumer = Consumer({"bootstrap.servers": run.bootstrap, "group.id": "txn-chaos-reader", "log_level": 0,
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), WAIT_S, cached=False)[1]
                for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records: list[tuple[int, int, bytes]] = []
        done: set[int] = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + WAIT_S * 2
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic} ({isolation}) read only to {done} of {ends}"
            for message in consumer.consume(500, 0.5):
                error = message.error()
                if error is None:
                    records.append((message.partition(), message.offset(), message.value()))
                elif error.code() == KafkaError._PARTITION_EOF and message.offset() >= ends[message.partition()]:
                    done.add(message.partition())
        return records
    finally:
        consumer.close()


def stable_ends(run: Run, topic: str) -> bool:
    """No transaction open on `topic`: its last stable offset is its high watermark."""
    reader = Consumer({"bootstrap.servers": run.bootstrap, "group.id": "txn-chaos-reader", "log_level": 0,
                       "isolation.level": "read_committed"})
    plain = Consumer({"bootstrap.servers": run.bootstrap, "group.id": "txn-chaos-reader", "log_level": 0,
                      "isolation.level": "read_uncommitted"})
    try:
        return all(reader.get_watermark_offsets(TopicPartition(topic, p), WAIT_S, cached=False)[1] ==
                   plain.get_watermark_offsets(TopicPartition(topic, p), WAIT_S, cached=False)[1]
                   for p in range(PARTITIONS))
    except Exception:  # noqa: BLE001 - a leader not answering yet: ask again
        return False
    finally:
        reader.close()
        plain.close()


def check_outputs(run: Run, inputs: dict[str, list[bytes]]) -> dict[str, int]:
    counts = {}
    for pipeline in PIPELINES:
        run.until(lambda: stable_ends(run, pipeline.output), f"{pipeline.output}: no open transaction", WAIT_S)
        committed_records = read_output(run, pipeline.output, "read_committed")
        everything = [v for _, _, v in read_output(run, pipeline.output, "read_uncommitted")]
        committed = [v for _, _, v in committed_records]
        fields = [v.split(b"|") for v in committed]
        seen = Counter(f[0] for f in fields)
        expected = Counter(inputs[pipeline.name])
        lost = sorted(expected - seen)
        duplicated = sorted(v for v, n in seen.items() if n > 1)
        unexpected = sorted(set(seen) - set(expected))
        if lost:
            run.violate(f"{pipeline.output}: {len(lost)} input values never read_committed: {lost[:5]}")
        if duplicated:
            shown = {v: [(p, o, value.split(b"|", 1)[1]) for p, o, value in committed_records
                         if value.split(b"|")[0] == v] for v in duplicated[:5]}
            run.violate(f"{pipeline.output}: {len(duplicated)} input values read_committed twice or more "
                        f"(partition, offset, copier|transaction): {shown}")
        if unexpected:
            run.violate(f"{pipeline.output}: values not in the input: {unexpected[:5]}")
        aborted_visible = [v for v, f in zip(committed, fields) if f[3] == b"A"]
        if aborted_visible:
            run.violate(f"{pipeline.output}: records of aborted transactions read_committed: {aborted_visible[:5]}")
        if run.zombie is not None:
            instance, seq = run.zombie[0].encode(), str(run.zombie[1]).encode()
            visible = [v for v, f in zip(committed, fields) if (f[1], f[2]) == (instance, seq)]
            if visible:
                run.violate(f"{pipeline.output}: the fenced zombie's records read_committed: {visible[:5]}")
        hidden = len(everything) - len(committed)
        aborted_written = sum(1 for v in everything if v.split(b"|")[3] == b"A")
        if not aborted_written:  # the check above would hold vacuously
            run.violate(f"{pipeline.output}: read_uncommitted shows no record of an on-purpose abort")
        if run.zombie is not None and run.zombie[0].startswith(pipeline.name + "-") and not any(
                (f[1], f[2]) == (run.zombie[0].encode(), str(run.zombie[1]).encode())
                for f in (v.split(b"|") for v in everything)):
            run.violate(f"{pipeline.output}: read_uncommitted shows no record of the zombie's transaction")
        counts[pipeline.output] = len(committed)
        counts[f"{pipeline.output} aborted records (read_uncommitted only)"] = hidden
        counts[f"{pipeline.output} records of on-purpose aborts"] = aborted_written
    return counts


# -- the run ----------------------------------------------------------------------------------------

def run_txn_chaos(brokers: dict, zk: KazooClient, chroot: str, seed: int, kills: int, records: int) -> Run:
    run = Run(brokers, zk, "/" + chroot.split("/", 1)[1], seed, records)
    run.note(f"seed {seed}: {kills} kills, {records} records per input")
    for broker in brokers.values():
        broker.start()
    for broker in brokers.values():
        assert run.until(lambda: _sees_every_broker(broker), f"{broker.bootstrap} sees every broker", WAIT_S), \
            run.report()
    admin = AdminClient({"bootstrap.servers": run.bootstrap, "log_level": 0})
    topics = [NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
              for p in PIPELINES for t in (p.input, p.output)]
    for future in admin.create_topics(topics).values():
        future.result(WAIT_S)
    inputs = prefill(run)
    run.copiers = [Copier(run, pipeline, slot) for pipeline in PIPELINES for slot in range(pipeline.copiers)]
    try:
        for copier in run.copiers:
            copier.start()
        total = run.total = records * len(PIPELINES)
        assert run.wait_event(lambda: run.progress > 0, WAIT_S * 2), f"no copier committed: {run.copier_errors}"
        assert run.until(run.fully_in_sync, "every partition in sync at the start"), run.report()
        zombie_at = run.rng.randrange(max(1, kills // 3))
        copy_done = False  # early: the copy must still go on for it
        for number in range(kills):
            # a random point of the copy: some records further, then a random moment
            # (spread over what is left to copy: a broker's recovery lets the copy run on meanwhile)
            gap = run.rng.randint(1, max(1, (total - run.progress) // (kills - number + 1)))
            target = run.progress + gap
            # The count misses commits whose copier was killed before it said so: once nothing
            # more comes, the copy is taken as done and the kills go on without waiting.
            if not copy_done and not run.wait_event(lambda: run.progress >= min(target, total), WAIT_S * 2):
                copy_done = True
                run.note(f"no commit for {WAIT_S * 2:.0f}s at {run.progress} records: the copy is done")
            time.sleep(run.rng.uniform(0, 0.5))  # where in a transaction the kill lands: drawn, not asserted on
            if run.progress < total and not copy_done:
                run.kills["during the copy"] += 1
            if number >= zombie_at and run.zombie is None and run.progress < total:
                make_a_zombie(run)
            kill = run.rng.choice(KILLS)
            run.note(f"kill {number + 1}/{kills} at {run.progress} records committed: {kill.__name__}")
            kill(run)
        run.note("kills done; waiting for the copy to end")
        for pipeline in PIPELINES:
            end = {p: (records - p + PARTITIONS - 1) // PARTITIONS for p in range(PARTITIONS)}
            if not run.until(lambda: committed_offsets(run, pipeline) == end,
                             f"{pipeline.group} committed its input's end {end}", COPY_S):
                run.violate(f"{pipeline.group} committed {committed_offsets(run, pipeline)}, input ends {end}")
        with run.changed:
            run.stopping = True
        for copier in run.copiers:
            copier.tell(copier.process, "stop")
        for copier in run.copiers:
            try:
                copier.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                os.kill(copier.process.pid, signal.SIGUSR1)  # its threads' stacks, to its stderr
                time.sleep(1)  # the stacks written before the kill: not asserted on
                name = f"{copier.transactional_id}#{copier.incarnation}"
                stacks = (run.log_dir / f"{name}.stderr").read_text(errors="replace")[-3000:]
                # The copy is complete and committed (waited for above): a client that does not
                # close is librdkafka's stop, not the broker's exactly-once, so it is killed and
                # reported, and the output is checked as after any crash.
                run.note(f"copier {name} did not stop; killed; its last lines: {copier.lines[-3:]}; stacks: {stacks}")
                copier.kill()
        counts = check_outputs(run, inputs)
        for pipeline in PIPELINES:  # after the reads: still the input's end
            end = {p: (records - p + PARTITIONS - 1) // PARTITIONS for p in range(PARTITIONS)}
            if committed_offsets(run, pipeline) != end:
                run.violate(f"{pipeline.group}: committed offsets {committed_offsets(run, pipeline)} != {end}")
        if run.zombie is None and kills:
            run.violate("no zombie was made")
        run.note(f"done: kills {dict(run.kills)}, records {counts}, transactions aborted {run.aborts}, "
                 f"copier exits {len(run.exits)}, copier errors {len(run.copier_errors)}")
    finally:
        with run.changed:
            run.stopping = True
        for copier in run.copiers:
            copier.kill()
        for stray in run.strays:
            if stray.poll() is None:
                os.kill(stray.pid, signal.SIGCONT)
                stray.kill()
    return run


def _seed() -> int:
    return int(os.environ.get("TIDEMARK_CHAOS_SEED") or random.SystemRandom().randrange(2**32))


def _kills() -> int:
    return int(os.environ.get("TIDEMARK_TXN_CHAOS_KILLS") or CI_KILLS)


@pytest.mark.timeout(900)  # a hang guard: one seed's run takes about 150 s on a loaded 2-core machine
@pytest.mark.parametrize("run_number", range(CI_SEEDS))
def test_every_input_record_is_copied_exactly_once_through_kills_and_a_zombie(make_broker, zk, chroot, run_number):
    seed, kills = _seed(), _kills()
    print(f"txn chaos seed {seed} (replay the schedule: TIDEMARK_CHAOS_SEED={seed})")
    brokers = {i: make_broker({**SETTINGS, "zookeeper.connect": chroot, "broker.id": str(i)}) for i in BROKERS}
    run = run_txn_chaos(brokers, zk, chroot, seed, kills, RECORDS_PER_KILL * (kills + 2))
    assert not run.violations, run.report()


def main(argv: list[str] | None = None) -> int:
    """The long run, outside pytest: its own ZooKeeper and brokers in a temporary directory."""
    from tests.conftest import BrokerProcess
    from tidemark.zk.local_server import ZooKeeperServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=300)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--records", type=int, default=None, help="per input (default: 200 per kill)")
    parser.add_argument("--keep", type=Path, default=None, help="a directory for the logs and data, kept")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    with tempfile.TemporaryDirectory(prefix="txn-chaos-") as scratch:
        tmp = args.keep or scratch
        zookeeper = ZooKeeperServer(Path(tmp) / "zookeeper").start()
        zk = KazooClient(hosts=zookeeper.connect, timeout=10.0)
        brokers = {}
        try:
            zk.start(timeout=30)
            zk.create("/txn-chaos")
            chroot = zookeeper.connect + "/txn-chaos"
            brokers = {i: BrokerProcess(Path(tmp) / f"data{i}", {**SETTINGS, "zookeeper.connect": chroot,
                                                                 "broker.id": str(i)}) for i in BROKERS}
            run = run_txn_chaos(brokers, zk, chroot, seed, args.kills,
                                args.records or LONG_RECORDS_PER_KILL * (args.kills + 2))
        finally:
            for broker in brokers.values():
                broker.kill()
            zk.stop()
            zk.close()
            zookeeper.stop()
    print(run.report() if run.violations else f"seed {seed}: no violation")
    return 1 if run.violations else 0


if __name__ == "__main__":
    sys.exit(main())
