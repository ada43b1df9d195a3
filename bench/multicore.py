"""Would a second broker process pay on this machine? One broker next to two independent ones.

    python -m bench.multicore [--seconds S] [--repeats N] [--cases a,b] [--forward]

The commit cases of bench.offsets, with confluent-kafka Consumers (assign() only, synchronous
commit(offsets=[...]) in a loop):
  (a) --clients clients x 1 partition each;
  (b) --batch-clients clients x --batch-partitions partitions per commit.
Each case runs in three layouts, the clients always split over two client processes (half each,
one group per half), so the client side costs the same in every layout:
  one      both halves commit to one broker process;
  two      each half commits to its own broker process: two independent brokers, no forwarding,
           no shared state, i.e. the upper bound of any sharding of the offsets partitions over
           two processes;
  forward  (--forward) each half goes through bench.forward_front, a front process that reads
           frames and hands every request to the worker (a broker) that owns the group, over a
           Unix socket: the cost of the hop a real multi-process design needs.
Reported per layout: aggregate throughput (median of --repeats, layouts alternated in each
repeat), and each process's CPU over the measured window (broker(s), front, client processes),
as a share of one core and as CPU microseconds per commit (a) or per partition offset (b).
Every run checks that the last committed offset of every partition reads back.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.offsets import TIDEMARK_SETTINGS, check_committed, new_consumer
from bench.produce_fetch import BenchError, BrokerProcess, console
from tidemark.coordinator.partitioner import partition_for

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OFFSETS_PARTITIONS = 50  # TIDEMARK_SETTINGS' offsets.topic.num.partitions
MAX_COMMITS = 2_000_000  # every loop is bounded in count as well as in time


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads) from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# ------------------------------------------------------------------------------ client processes


def client_process(bootstrap: str, topic: str, group: str, partition_sets: list[list[int]],
                   ready, start_queue, results) -> None:
    """One thread and consumer per partition set; all commit from the start time the parent sends
    until start + seconds. Puts (commits, partition offsets, last offsets, own CPU seconds)."""
    import threading

    try:
        consumers = [new_consumer(bootstrap, group) for _ in partition_sets]
        for consumer, partitions in zip(consumers, partition_sets):
            consumer.assign([TopicPartition(topic, p) for p in partitions])
            consumer.commit(offsets=[TopicPartition(topic, p, 0) for p in partitions], asynchronous=False)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        ready.put(repr(error))
        return
    ready.put("ready")
    start, seconds = start_queue.get()
    counts = [0] * len(partition_sets)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        consumer, partitions = consumers[index], partition_sets[index]
        time.sleep(max(0.0, start - time.time()))
        end = start + seconds
        offset = 0
        try:
            while offset < MAX_COMMITS and time.time() < end:
                offset += 1
                consumer.commit(offsets=[TopicPartition(topic, p, offset) for p in partitions], asynchronous=False)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)
        counts[index] = offset

    cpu_before = time.process_time()
    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(partition_sets))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 60)
    cpu = time.process_time() - cpu_before
    for consumer in consumers:
        consumer.close()
    if errors or any(thread.is_alive() for thread in threads):
        results.put(f"client errors: {errors[:3]!r}")
        return
    last = {p: counts[i] for i, partitions in enumerate(partition_sets) for p in partitions}
    results.put((sum(counts), sum(c * len(s) for c, s in zip(counts, partition_sets)), last, cpu))


# ---------------------------------------------------------------------------------------- layouts


@dataclass
class Run:
    layout: str
    case: str
    commits: int
    items: int
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)  # process label -> CPU seconds in the window

    @property
    def per_second(self) -> float:
        return (self.commits if self.case == "a" else self.items) / self.seconds


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                                  operation_timeout=30, request_timeout=30)
    futures[topic].result(60)
    consumer = new_consumer(bootstrap, "metadata-" + topic)
    try:
        deadline = time.monotonic() + 60
        while len(consumer.list_topics(topic, timeout=30).topics[topic].partitions) != partitions:
            if time.monotonic() > deadline:
                raise BenchError(f"{topic} never showed {partitions} partitions on {bootstrap}")
            time.sleep(0.05)
    finally:
        consumer.close()


def run_case(case: str, layout: str, bootstraps: list[str], pids: dict[str, int], args) -> Run:
    """bootstraps[i] is where half i of the clients connects (the same address twice for `one`
    and `forward`); the topic is created through each address in args.admins; `pids` are the
    processes whose CPU is measured, by label."""
    tag = uuid.uuid4().hex[:8]
    if case == "a":
        per_half = args.clients // 2
        width = 1
    else:
        per_half = args.batch_clients // 2
        width = args.batch_partitions
    topic = f"multicore-{case}-{tag}"
    partitions = per_half * width * 2
    for admin in args.admins:
        create_topic(admin, topic, partitions)
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    starts = [context.Queue() for _ in range(2)]
    halves = []
    for half in range(2):
        first = half * per_half * width
        sets = [list(range(first + c * width, first + (c + 1) * width)) for c in range(per_half)]
        group = group_for_half(f"multicore-{case}-{tag}", half)
        process = context.Process(target=client_process, daemon=True,
                                  args=(bootstraps[half], topic, group, sets, ready, starts[half], results))
        process.start()
        halves.append((process, group, bootstraps[half]))
    try:
        for _ in range(2):
            status = ready.get(timeout=120)
            if status != "ready":
                raise BenchError(f"client process failed to start: {status}")
        start = time.time() + 0.3
        for queue in starts:
            queue.put((start, args.seconds))
        time.sleep(max(0.0, start - time.time()))
        before = {label: cpu_seconds(pid) for label, pid in pids.items()}
        time.sleep(args.seconds)
        after = {label: cpu_seconds(pid) for label, pid in pids.items()}
        got = [results.get(timeout=args.seconds + 120) for _ in range(2)]
        for item in got:
            if isinstance(item, str):
                raise BenchError(item)
        for process, _, _ in halves:
            process.join(60)
    finally:
        for process, _, _ in halves:
            if process.is_alive():
                process.kill()
    run = Run(layout, case, sum(g[0] for g in got), sum(g[1] for g in got), args.seconds,
              {label: after[label] - before[label] for label in pids})
    run.cpu["clients"] = sum(g[3] for g in got)
    # results arrive in either order: check each group's offsets against whichever half had them
    lasts = {}
    for item in got:
        lasts.update(item[2])
    for process, group, bootstrap in halves:
        half_partitions = range(0, partitions // 2) if group.endswith("-0") else range(partitions // 2, partitions)
        check_committed(bootstrap, topic, group, {p: lasts[p] for p in half_partitions})
    return run


def group_for_half(prefix: str, half: int) -> str:
    """A group name ending in -<half> whose offsets partition is even for half 0 and odd for half
    1, so the forward layout's two workers (partition % 2) each own one half's group."""
    for n in range(1000):
        name = f"{prefix}-{n}-{half}"
        if partition_for(name, OFFSETS_PARTITIONS) % 2 == half:
            return name
    raise BenchError("no group name found")


def start_brokers(tmp: Path, count: int) -> list[BrokerProcess]:
    brokers = []
    for index in range(count):
        brokers.append(BrokerProcess(tmp / f"broker{index}-{uuid.uuid4().hex[:6]}", TIDEMARK_SETTINGS).start())
    return brokers


def stop(brokers) -> None:
    for broker in brokers:
        try:
            broker.stop()
        finally:
            broker.kill()


def one_layout(tmp: Path, case: str, args) -> Run:
    brokers = start_brokers(tmp, 1)
    try:
        args.admins = [brokers[0].bootstrap]
        return run_case(case, "one", [brokers[0].bootstrap] * 2, {"broker": brokers[0].process.pid}, args)
    finally:
        stop(brokers)


def two_layout(tmp: Path, case: str, args) -> Run:
    brokers = start_brokers(tmp, 2)
    try:
        args.admins = [b.bootstrap for b in brokers]
        return run_case(case, "two", [b.bootstrap for b in brokers],
                        {f"broker{i}": b.process.pid for i, b in enumerate(brokers)}, args)
    finally:
        stop(brokers)


def forward_layout(tmp: Path, case: str, args) -> Run:
    from bench.forward_front import FrontProcess

    front = FrontProcess(tmp / f"front-{uuid.uuid4().hex[:6]}", workers=args.forward_workers).start()
    try:
        args.admins = [front.bootstrap]
        pids = {"front": front.pid, **{f"worker{i}": pid for i, pid in enumerate(front.worker_pids)}}
        return run_case(case, "forward", [front.bootstrap] * 2, pids, args)
    finally:
        front.stop()


LAYOUTS = {"one": one_layout, "two": two_layout, "forward": forward_layout}


# ------------------------------------------------------------------------------------------ report


def report(runs: list[Run], args) -> None:
    load = os.getloadavg()
    console.print(f"\nmedians of {args.repeats} (load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
                  f"{os.cpu_count()} cores)")
    for case in args.cases:
        unit = "commits/s" if case == "a" else "partition offsets/s"
        label = f"(a) {args.clients}x1" if case == "a" else f"(b) {args.batch_clients}x{args.batch_partitions}"
        base = None
        for layout in args.layouts:
            mine = [r for r in runs if r.case == case and r.layout == layout]
            if not mine:
                continue
            rate = statistics.median(r.per_second for r in mine)
            base = base or rate
            cpu_labels = list(mine[0].cpu)
            shares = ", ".join(
                f"{name} {statistics.median(r.cpu[name] / r.seconds for r in mine) * 100:.0f}%"
                f" ({statistics.median(r.cpu[name] / (r.commits if case == 'a' else r.items) for r in mine) * 1e6:.0f} us)"
                for name in cpu_labels)
            all_rates = " ".join(f"{r.per_second:,.0f}" for r in mine)
            console.print(f"  {label} {layout:8} {rate:>10,.0f} {unit} ({rate / base:.2f}x one)  [{all_rates}]")
            console.print(f"      CPU (share of a core, us per {'commit' if case == 'a' else 'offset'}): {shares}")


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m bench.multicore", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=20, help="(a) clients, one partition each (even)")
    parser.add_argument("--batch-clients", type=int, default=8, help="(b) clients (even)")
    parser.add_argument("--batch-partitions", type=int, default=100, help="(b) partitions per commit")
    parser.add_argument("--cases", default="a,b")
    parser.add_argument("--layouts", default="one,two", help="comma-separated subset of one,two,forward")
    parser.add_argument("--forward", action="store_true", help="add the forward layout")
    parser.add_argument("--forward-workers", type=int, default=2, help="workers behind the front (default 2)")
    args = parser.parse_args(argv)
    args.cases = args.cases.split(",")
    args.layouts = args.layouts.split(",") + (["forward"] if args.forward and "forward" not in args.layouts else [])
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="tidemark-multicore-") as tmp:
        for repeat in range(args.repeats):
            for case in args.cases:
                order = args.layouts if repeat % 2 == 0 else list(reversed(args.layouts))
                for layout in order:
                    run = LAYOUTS[layout](Path(tmp), case, args)
                    runs.append(run)
                    cpu = ", ".join(f"{k} {v / run.seconds * 100:.0f}%" for k, v in run.cpu.items())
                    console.print(f"  repeat {repeat + 1} ({case}) {layout:8} {run.per_second:>10,.0f}/s  CPU: {cpu}")
    report(runs, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
