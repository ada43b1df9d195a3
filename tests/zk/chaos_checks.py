"""What the chaos tests run and check, shared by them (test_coordinator_failover.py,
test_chaos_elections.py): an idempotent acks=all producer, a consumer group committing
synchronously after every batch, an OffsetFetch checker, and the invariants Kafka's system tests
and Jepsen's checkers hold a replicated log to:

- every acknowledged record is read back at its acknowledged offset (no lost write);
- no offset holds two records (no two acknowledgements, no two reads, of one offset);
- every acknowledged record has an offset (Kafka never acknowledges a write without one);
- OffsetFetch never answers less than the last acknowledged commit;
- the replicas' logs are identical at the end, read from their segment files offline;
- librdkafka never reports a fatal error (an idempotence sequence it cannot reconcile).
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tidemark.log.direct_read import iter_log_records, topic_partition_dirs

WAIT_S = 60


class BoundedWaits:
    """A chaos run's bounded waits: what does not come in time is recorded as a violation (not
    raised), so the run goes on to its final checks, which say what else went wrong. The class
    using it keeps `events` (what was done, newest last) and `violations`."""

    events: list[str]
    violations: list[str]

    def violate(self, text: str) -> None:
        self.violations.append(f"{text} [after: {'; '.join(self.events[-3:])}]")

    def until(self, condition: Callable[[], bool], what: str, bound_s: float) -> bool:
        deadline = time.monotonic() + bound_s
        while not condition():
            if time.monotonic() > deadline:
                self.violate(f"not within {bound_s:.0f}s: {what}")
                return False
            time.sleep(0.1)
        return True


@dataclass
class Workload:
    """The clients' settings: which topic, how many partitions, which group, how fast."""

    bootstrap: str
    topic: str = "orders"
    partitions: int = 6
    group: str = "validation"
    max_records: int = 200_000  # the producer stops here at the latest (it is stopped after the rounds)
    burst: int = 20  # records between the producer's pauses
    pause_s: float = 0.02  # pacing only (~1,000 records/s): nothing is asserted on it


@dataclass
class Ledger:
    """What the clients saw, shared by their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(init=False)
    produced: dict[tuple[int, int], bytes] = field(default_factory=dict)  # acknowledged (partition, offset) -> value
    produce_errors: list[str] = field(default_factory=list)
    double_acks: list[str] = field(default_factory=list)  # two records acknowledged at one offset
    extra_acks: list[tuple[tuple[int, int], bytes]] = field(default_factory=list)  # the later of those
    # Successes without an offset, kept out of `produced` (its keys are offsets): (partition,
    # value, phase). A broker never acknowledges a write without its offset, but librdkafka
    # does, for a batch whose request failed as "possibly persisted" (a timeout, a lost
    # connection) when a later batch of the partition succeeds: its records must be in the log.
    offsetless_acks: list[tuple[int, bytes, str]] = field(default_factory=list)
    fatal_errors: list[str] = field(default_factory=list)  # librdkafka's fatal errors (any client)
    client_errors: list[str] = field(default_factory=list)  # librdkafka's other error_cb reports (not failures)
    consumed: list[tuple[int, int]] = field(default_factory=list)  # (partition, offset), in order
    consumed_values: dict[tuple[int, int], bytes] = field(default_factory=dict)
    read_conflicts: list[str] = field(default_factory=list)  # one offset read with two values
    acked: dict[int, int] = field(default_factory=dict)  # partition -> last acknowledged commit
    commits_acked: int = 0
    commits_failed: list[str] = field(default_factory=list)
    rebalances: list[tuple[int, str, list[int]]] = field(default_factory=list)  # (member, assign/revoke, partitions)
    stats: dict[int, dict] = field(default_factory=dict)  # member -> librdkafka's last cgrp statistics
    fetch_violations: list[str] = field(default_factory=list)
    fetches_checked: int = 0
    consumer_errors: list[str] = field(default_factory=list)
    phase: str = ""  # what the test is doing now (set by it): named in the violations seen meanwhile

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def wait(self, predicate, what: str, timeout_s: float = WAIT_S) -> None:
        with self.changed:
            if not self.changed.wait_for(predicate, timeout_s):
                raise AssertionError(f"not within {timeout_s}s: {what}; {self.summary()}")

    def summary(self) -> str:
        return (f"produced={len(self.produced)} consumed={len(self.consumed)} commits={self.commits_acked} "
                f"failed={self.commits_failed[-3:]} rebalances={self.rebalances} stats={self.stats}")

    def error_cb(self, who: str):
        """A librdkafka error_cb recording fatal errors apart from the transient ones."""
        def report(error) -> None:
            with self.changed:
                (self.fatal_errors if error.fatal() else self.client_errors).append(f"{who}: {error}")
                self.changed.notify_all()
        return report


def delivery_recorder(ledger: Ledger, name: str) -> Callable[[object, object], None]:
    """The producer's delivery callback: each outcome into the ledger (see Ledger)."""
    def delivered(error, message) -> None:
        with ledger.changed:
            if error is not None:
                ledger.produce_errors.append(str(error))
                if error.fatal():
                    ledger.fatal_errors.append(f"producer {name} delivery: {error}")
            elif message.offset() is None:
                ledger.offsetless_acks.append((message.partition(), message.value(), ledger.phase))
            else:
                key = (message.partition(), message.offset())
                if key in ledger.produced and ledger.produced[key] != message.value():
                    ledger.double_acks.append(f"{key}: {ledger.produced[key]!r} and {message.value()!r}"
                                              + (f" (during: {ledger.phase})" if ledger.phase else ""))
                    ledger.extra_acks.append((key, message.value()))
                else:
                    ledger.produced[key] = message.value()
            ledger.changed.notify_all()
    return delivered


def run_producer(workload: Workload, ledger: Ledger, stop: threading.Event, name: str = "record",
                 idempotent: bool = True) -> None:
    """acks=all, idempotent unless told, every value unique (`name`-N: producers of one ledger
    need their own names); runs until `stop`, then waits for every ack."""
    producer = Producer({"bootstrap.servers": workload.bootstrap, "log_level": 0, "enable.idempotence": idempotent,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 300_000,
                         "error_cb": ledger.error_cb(f"producer {name}")})

    delivered = delivery_recorder(ledger, name)

    sent = 0
    try:
        while sent < workload.max_records and not stop.is_set():
            for _ in range(workload.burst):
                producer.produce(workload.topic, f"{name}-{sent}".encode(), partition=sent % workload.partitions,
                                 on_delivery=delivered)
                sent += 1
            producer.poll(0)
            stop.wait(workload.pause_s)
    except KafkaException as exc:  # a fatal error refuses every produce after it
        with ledger.changed:
            ledger.fatal_errors.append(f"producer {name}: {exc}")
            ledger.changed.notify_all()
        return
    assert producer.flush(WAIT_S * 5) == 0, "the producer's records were not all acknowledged"


def run_consumer(member: int, workload: Workload, ledger: Ledger, stop: threading.Event,
                 session_timeout_ms: int = 45_000) -> None:
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

    consumer = Consumer({"bootstrap.servers": workload.bootstrap, "log_level": 0, "group.id": workload.group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "session.timeout.ms": session_timeout_ms, "statistics.interval.ms": 1000,
                         "stats_cb": on_stats, "error_cb": ledger.error_cb(f"consumer {member}")})
    consumer.subscribe([workload.topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            batch = consumer.consume(100, 0.2)
            offsets: dict[int, int] = {}
            with ledger.changed:
                for message in batch:
                    if message.error():
                        ledger.consumer_errors.append(str(message.error()))
                        continue
                    key = (message.partition(), message.offset())
                    seen = ledger.consumed_values.setdefault(key, message.value())
                    if seen != message.value():
                        ledger.read_conflicts.append(f"{key}: read {seen!r} and {message.value()!r}"
                                                     + (f" (during: {ledger.phase})" if ledger.phase else ""))
                    ledger.consumed.append(key)
                    offsets[message.partition()] = message.offset() + 1
                ledger.changed.notify_all()
            if offsets:
                commit(consumer, workload, offsets, ledger)
    finally:
        consumer.close()


def commit(consumer: Consumer, workload: Workload, offsets: dict[int, int], ledger: Ledger) -> None:
    """A synchronous commit; only what the coordinator acknowledged enters the ledger."""
    try:
        answered = consumer.commit(offsets=[TopicPartition(workload.topic, p, o) for p, o in offsets.items()],
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


def run_offset_fetcher(workload: Workload, ledger: Ledger, stop: threading.Event) -> None:
    """OffsetFetch in a loop: never below what was acknowledged before the request was sent."""
    # read_uncommitted: librdkafka then asks without require_stable, so a commit still in flight
    # (UNSTABLE_OFFSET_COMMIT, retried until the timeout) does not hide the committed offsets.
    checker = Consumer({"bootstrap.servers": workload.bootstrap, "log_level": 0, "group.id": workload.group,
                        "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    partitions = [TopicPartition(workload.topic, p) for p in range(workload.partitions)]
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
                            f"partition {tp.partition}: fetched {tp.offset} < acknowledged {acknowledged}"
                            + (f" (during: {ledger.phase})" if ledger.phase else ""))
    finally:
        checker.close()


def log_ends(ledger: Ledger, partitions: int) -> dict[int, int]:
    """Per partition: the offset after the last acknowledged record."""
    with ledger.lock:
        return {p: 1 + max((o for q, o in ledger.produced if q == p), default=-1) for p in range(partitions)}


def _watermarks(consumer: Consumer, topic: str, ends: dict[int, int]) -> str:
    """Each partition's (log start, high watermark) as its leader answers now, or why not."""
    found = {}
    for p in ends:
        try:
            found[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        except KafkaException as exc:
            found[p] = str(exc)
    return f"(log start, high watermark) per partition: {found}"


def read_back(workload: Workload, ends: dict[int, int]) -> dict[tuple[int, int], bytes]:
    """Every record of the topic below `ends`, read once from offset 0 by an unattached consumer.
    Asserts that no offset is delivered twice."""
    consumer = Consumer({"bootstrap.servers": workload.bootstrap, "log_level": 0, "group.id": "read-back",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(workload.topic, p, 0) for p in ends if ends[p] > 0])
    read: dict[tuple[int, int], bytes] = {}
    positions = {p: 0 for p in ends}
    errors: dict[str, int] = {}  # what the consumer reported meanwhile, for the failure message
    deadline = time.monotonic() + WAIT_S
    try:
        while any(positions[p] < ends[p] for p in ends):
            if time.monotonic() >= deadline:
                raise AssertionError(f"read back only up to {positions} of {ends}; the consumer's errors: "
                                     f"{errors or 'none'}; {_watermarks(consumer, workload.topic, ends)}")
            for message in consumer.consume(500, 0.5):
                if message.error():
                    text = f"partition {message.partition()}: {message.error()}"
                    errors[text] = errors.get(text, 0) + 1
                    continue
                key = (message.partition(), message.offset())
                assert key not in read, f"offset {key} delivered twice"
                read[key] = message.value()
                positions[key[0]] = max(positions[key[0]], key[1] + 1)
    finally:
        consumer.close()
    return read


Lost = tuple[tuple[int, int], bytes, bytes | None]  # (partition, offset), acknowledged value, value read


def lost_writes(ledger: Ledger, read: dict[tuple[int, int], bytes]) -> list[Lost]:
    """(partition and offset, acknowledged, read) of each acknowledged record not read back at its
    offset (Jepsen's lost-write, and a rewrite), the second of two acknowledged at one offset too."""
    with ledger.lock:
        acknowledged = sorted([*ledger.produced.items(), *ledger.extra_acks])
    return [(key, value, read.get(key)) for key, value in acknowledged if read.get(key) != value]


def offsetless_acks_missing(ledger: Ledger, read: dict[tuple[int, int], bytes]) -> list[str]:
    """Each success without an offset whose record was not read back in its partition (read up
    to the ends of the acknowledged offsets, which lie past it: a later batch's success is what
    acknowledged it): a lost write nobody could hold to an offset."""
    found = {(partition, value) for (partition, _), value in read.items()}
    with ledger.lock:
        acks = list(ledger.offsetless_acks)
    return [f"acknowledged without an offset: partition {partition} value {value!r}"
            + (f" during {phase}" if phase else "") + ", and not in the log"
            for partition, value, phase in acks if (partition, value) not in found]


def replica_records(data_dirs: dict[int, Path], topic: str) -> dict[int, dict[int, list[tuple]]]:
    """partition -> broker -> its log's (offset, timestamp, key, value), read offline from the
    segment files (the brokers are stopped, or at least not writing)."""
    by_partition: dict[int, dict[int, list[tuple]]] = defaultdict(dict)
    for broker_id, data_dir in data_dirs.items():
        for partition, directory in topic_partition_dirs(data_dir, topic):
            by_partition[partition][broker_id] = list(iter_log_records(directory))
    return by_partition


def replica_divergence(data_dirs: dict[int, Path], topic: str, replication_factor: int) -> list[str]:
    """How the replicas of each partition differ: a missing replica, a first offset holding other
    records, or another log end."""
    problems = []
    for partition, logs in sorted(replica_records(data_dirs, topic).items()):
        if len(logs) != replication_factor:
            problems.append(f"{topic}-{partition}: replicas on brokers {sorted(logs)} only")
        reference_id, reference = next(iter(logs.items()))
        for broker_id, records in logs.items():
            if records == reference:
                continue
            first = next((i for i, (a, b) in enumerate(zip(records, reference)) if a != b), None)
            if first is not None:  # shown without the timestamp: (offset, key, value)
                ours, theirs = records[first], reference[first]
                problems.append(f"{topic}-{partition}: broker {broker_id} holds {ours[:1] + ours[2:]} "
                                f"where broker {reference_id} holds {theirs[:1] + theirs[2:]}")
            else:
                problems.append(f"{topic}-{partition}: broker {broker_id} ends at {len(records)} records, "
                                f"broker {reference_id} at {len(reference)}")
    return problems
