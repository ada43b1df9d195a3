"""Transactional throughput against non-transactional acks=all, side by side in one run.

    python -m bench.transactions [--seconds 5] [--repeats 3] [--producers 1 8] [--cases a b c]
                                 [--compare KEY=VALUE ...] [--profile DIR]

A tidemark broker process is started here (127.0.0.1, free port, temporary data dir, defaults:
the high watermark follows the fsync'd group commit). confluent-kafka producers write 100-byte
records to a topic of 8 partitions, producer i to partition i (as a stream task writes its own
output partition), for --seconds each case:

  (a) idempotent, acks=all, not transactional: produce() in a loop, flush() at the end; the
      reference every ratio is taken against.
  (b) transactional, a commit every 100 records: begin, 100 records,
      send_offsets_to_transaction (one partition of a source topic, for a consumer group of its
      own), commit_transaction.
  (c) transactional, 100 ms commit intervals: begin, produce() for 100 ms, the offsets as in
      (b), commit_transaction (which flushes what is still queued, as Kafka Streams' commit
      does).

Every producer keeps at most 10,000 records unacknowledged (queue.buffering.max.messages), so
no case ends with a backlog to drain. Each case runs with 1 producer and with 8, one thread
each in this process, each with its own Producer (librdkafka does the I/O on its own threads;
produce() holds the GIL for microseconds while the broker spends far longer on each record; the
client and the broker still share the machine's cores). Reported: transactions/s, records/s
(acknowledged records over the time to the last ack or commit), the ratio of records/s to (a)
with the same number of producers, commit_transaction's latency p50/p99 and
send_offsets_to_transaction's p50. Every case runs --repeats times, rounds alternating the
cases, and the medians are shown. After each case a read_committed consumer checks that each
partition holds exactly the committed records.

--compare KEY=VALUE (repeatable) starts a second broker with those settings and runs every case
against both, alternating them, so a change and the setting that turns it off are measured side
by side in one run.

--profile DIR records the broker with py-spy (raw collapsed stacks) during each transactional case
with the most producers in one extra round after the others, and prints the top functions by own
and total samples (profiled rounds are slower; their throughput is not reported).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.table import Table

from bench.produce_fetch import console, out

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)

VALUE = b"x" * 100
PARTITIONS = 8
RECORDS_PER_TXN = 100
INTERVAL_S = 0.100
WAIT_S = 120.0  # a hang guard on every client call
# Each producer keeps at most this many records unacknowledged (produce() waits beyond it), in
# every case alike: with librdkafka's default (100,000) eight producers queue 80 MB within the
# first second and case (a) measures the drain of that backlog after the clock's end.
QUEUE_MESSAGES = 10_000
CASES = ("a", "b", "c")
CASE_NAMES = {"a": "(a) idempotent", "b": "(b) txn/100 records", "c": "(c) txn/100 ms"}


class Worker(threading.Thread):
    """One producer writing its partition for `seconds` in the case's way."""

    def __init__(self, bootstrap: str, case: str, topic: str, partition: int, seconds: float, tag: str,
                 start: threading.Barrier) -> None:
        super().__init__(name=f"{case}-{partition}")
        self.bootstrap, self.case, self.topic, self.partition = bootstrap, case, topic, partition
        self.seconds, self.tag, self.start_barrier = seconds, tag, start
        self.records = 0
        self.transactions = 0
        self.commit_ms: list[float] = []
        self.offsets_ms: list[float] = []
        self.elapsed = 0.0
        self.failures: list[object] = []

    def _produce(self, producer: Producer) -> None:
        while True:
            try:
                producer.produce(self.topic, VALUE, partition=self.partition)
                return
            except BufferError:
                producer.poll(0.005)

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            self.failures.append(exc)
            try:
                self.start_barrier.abort()
            except threading.BrokenBarrierError:
                pass

    def _run(self) -> None:
        # Delivery reports only for failures: a Python callback per record would cost the client
        # more than the broker's work on it.
        config = {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "log_level": 0, "delivery.report.only.error": True,
                  "queue.buffering.max.messages": QUEUE_MESSAGES,
                  "on_delivery": lambda error, _message: self.failures.append(error)}
        if self.case != "a":
            config["transactional.id"] = f"bench-{self.tag}-{self.partition}"
        producer = Producer(config)
        group = None
        if self.case != "a":
            producer.init_transactions(WAIT_S)
            group = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"bench-{self.tag}-{self.partition}",
                              "enable.auto.commit": False, "log_level": 0})
        try:
            # the partition's leader known before the clock starts (no metadata wait in the case)
            deadline = time.monotonic() + WAIT_S
            while not producer.list_topics(self.topic, 10).topics[self.topic].partitions:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{self.topic}: no metadata")
                time.sleep(0.05)
            self.start_barrier.wait(WAIT_S)
            started = time.perf_counter()
            deadline = started + self.seconds
            if self.case == "a":
                produced = 0
                while time.perf_counter() < deadline:
                    self._produce(producer)
                    produced += 1
                if producer.flush(WAIT_S) != 0:
                    raise RuntimeError("flush left records unsent")
                self.records = produced
            else:
                assert group is not None
                source_offset = 0
                while time.perf_counter() < deadline:
                    producer.begin_transaction()
                    produced = 0
                    if self.case == "b":
                        for _ in range(RECORDS_PER_TXN):
                            self._produce(producer)
                        produced = RECORDS_PER_TXN
                    else:
                        until = time.perf_counter() + INTERVAL_S
                        while time.perf_counter() < until:
                            self._produce(producer)
                            produced += 1
                    source_offset += produced
                    before = time.perf_counter()
                    producer.send_offsets_to_transaction(
                        [TopicPartition(f"{self.topic}-source", self.partition, source_offset)],
                        group.consumer_group_metadata(), WAIT_S)
                    self.offsets_ms.append((time.perf_counter() - before) * 1000)
                    before = time.perf_counter()
                    producer.commit_transaction(WAIT_S)
                    self.commit_ms.append((time.perf_counter() - before) * 1000)
                    self.records += produced
                    self.transactions += 1
            self.elapsed = time.perf_counter() - started
        finally:
            if group is not None:
                group.close()


def _create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the results are in
    futures = admin.create_topics([NewTopic(name, PARTITIONS, 1) for name in names])
    for future in futures.values():
        future.result(60)


def _committed_counts(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Records a read_committed consumer reads per partition (to the end of the log)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "isolation.level":
                         "read_committed", "enable.auto.commit": False, "log_level": 0,
                         "enable.partition.eof": True, "fetch.max.bytes": 8 << 20})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    counts: Counter[int] = Counter()
    at_end: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 1.0):
                error = message.error()
                if error is None:
                    counts[message.partition()] += 1
                    at_end.discard(message.partition())
                elif error.code() == -191:  # _PARTITION_EOF
                    at_end.add(message.partition())
                else:
                    raise RuntimeError(f"consume failed: {error}")
    finally:
        consumer.close()
    if len(at_end) < partitions:
        raise RuntimeError(f"{topic}: not read to the end within {WAIT_S}s")
    return dict(counts)


def run_case(bootstrap: str, case: str, producers: int, seconds: float, tag: str, check: bool) -> dict[str, float]:
    topic = f"txn-{tag}"
    _create_topics(bootstrap, [topic] + ([f"{topic}-source"] if case != "a" else []))
    barrier = threading.Barrier(producers)
    workers = [Worker(bootstrap, case, topic, i, seconds, tag, barrier) for i in range(producers)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT_S + seconds * 4)
        if worker.is_alive():
            raise RuntimeError(f"{case}: producer {worker.name} hung")
    failures = [f for w in workers for f in w.failures]
    if failures:
        raise RuntimeError(f"case {case}: {failures[:3]}")
    elapsed = max(w.elapsed for w in workers)
    records = sum(w.records for w in workers)
    transactions = sum(w.transactions for w in workers)
    commits = sorted(ms for w in workers for ms in w.commit_ms)
    offsets = sorted(ms for w in workers for ms in w.offsets_ms)
    if check:
        counts = _committed_counts(bootstrap, topic, PARTITIONS)
        expected = {w.partition: w.records for w in workers if w.records}
        if counts != expected:
            raise RuntimeError(f"case {case}: read_committed read {counts}, committed {expected}")
    return {"records_s": records / elapsed,
            "txns_s": transactions / elapsed if case != "a" else records / RECORDS_PER_TXN / elapsed,
            "p50": _quantile(commits, 0.50), "p99": _quantile(commits, 0.99),
            "offsets_p50": _quantile(offsets, 0.50)}


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(q * len(values)))]


def _profile(broker: BrokerProcess, directory: Path, case: str, producers: int, seconds: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / f"case-{case}-{producers}p.txt"
    assert broker.process is not None
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(broker.process.pid),
                            "--format", "raw", "--rate", "200", "--output", str(raw), "--nonblocking"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        run_case(broker.bootstrap, case, producers, seconds, f"profile-{case}{producers}", check=False)
    finally:
        spy.send_signal(2)
        spy.wait(60)
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    table = Table(title=f"Broker profile, {CASE_NAMES[case]}, {producers} producers ({samples} samples; {raw})")
    for column in ("own %", "function", "total %", "function"):
        table.add_column(column, justify="right" if column.endswith("%") else "left")
    for (own_name, own_count), (tot_name, tot_count) in zip(own.most_common(25), total.most_common(25)):
        table.add_row(f"{100 * own_count / samples:.1f}", own_name[:70], f"{100 * tot_count / samples:.1f}",
                      tot_name[:70])
    out.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="how long each case produces")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians are shown)")
    parser.add_argument("--producers", type=int, nargs="+", default=[1, 8], help="producer counts")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--compare", metavar="KEY=VALUE", action="append", default=[],
                        help="also run every case against a second broker with these settings, "
                             "rounds alternating the brokers (e.g. the setting that restores earlier behaviour)")
    parser.add_argument("--no-check", action="store_true", help="skip the read_committed count check")
    parser.add_argument("--profile", type=Path, help="record the broker with py-spy in case (c) into DIR")
    args = parser.parse_args()

    targets = {"defaults": {}}
    if args.compare:
        targets["compared"] = dict(kv.split("=", 1) for kv in args.compare)
    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp_dir:
        brokers = {name: BrokerProcess(Path(tmp_dir) / f"data-{i}", settings=settings)
                   for i, (name, settings) in enumerate(targets.items())}
        try:
            for broker in brokers.values():
                broker.start()
            for round_ in range(args.repeats):
                for producers in args.producers:
                    for case in args.cases:
                        for name, broker in brokers.items():
                            tag = f"{case}{producers}r{round_}"
                            result = run_case(broker.bootstrap, case, producers, args.seconds, tag,
                                              not args.no_check)
                            results.setdefault((name, case, producers), []).append(result)
                            console.print(f"round {round_ + 1} [{name}]: {CASE_NAMES[case]}, {producers} producer(s): "
                                          f"{result['records_s']:,.0f} records/s, {result['txns_s']:,.1f} txn/s, "
                                          f"commit p50 {result['p50']:.1f} ms, "
                                          f"send_offsets p50 {result['offsets_p50']:.1f} ms", markup=False)
            if args.profile is not None:
                for case in args.cases:
                    if case != "a":
                        _profile(brokers["defaults"], args.profile, case, max(args.producers), args.seconds)
        finally:
            for broker in brokers.values():
                try:
                    if broker.process is not None:
                        broker.stop()
                finally:
                    broker.kill()

    def median(name: str, case: str, producers: int, key: str) -> float:
        return statistics.median(r[key] for r in results[(name, case, producers)])

    compared = f"; compared: {' '.join(args.compare)}" if args.compare else ""
    table = Table(title=f"Transactions against idempotent acks=all: 100-byte records, {args.seconds:g} s per case, "
                        f"medians of {args.repeats}{compared}")
    for column in ("broker", "case", "producers", "txn/s", "records/s", "ratio to (a)", "commit p50 ms",
                   "commit p99 ms", "send_offsets p50 ms"):
        table.add_column(column, justify="left" if column in ("broker", "case") else "right")
    for producers in args.producers:
        for name in targets:
            for case in args.cases:
                records = median(name, case, producers, "records_s")
                reference = median(name, "a", producers, "records_s") if "a" in args.cases else float("nan")
                txn = "-" if case == "a" else f"{median(name, case, producers, 'txns_s'):,.1f}"
                p50, p99, offsets = ("-", "-", "-") if case == "a" else (
                    f"{median(name, case, producers, key):.1f}" for key in ("p50", "p99", "offsets_p50"))
                ratio = f"{records / reference:.2f}" if "a" in args.cases else "-"
                table.add_row(name, CASE_NAMES[case], str(producers), txn, f"{records:,.0f}", ratio, p50, p99,
                              offsets)
    out.print(table)


if __name__ == "__main__":
    main()
