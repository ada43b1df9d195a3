"""`tidemark groups describe --all-groups` on many groups: the whole command's wall time.

    python -m bench.groups_describe [--groups 1000] [--partitions 3] [--repeats 3] [--src DIR]

One broker (`tidemark serve`, 10 offsets partitions) with a topic of --partitions partitions,
100 records in each; every group commits one offset per partition (offsets spread over the
log, several commits each so the lag history has points), then the command runs as a
subprocess with --output json (its wall time includes the interpreter's start and imports; its
CPU time is reported beside, the machine may be shared) and its answer is checked: every group, every partition, the
right committed offsets. --src runs another tree's `tidemark` (e.g. a checkout before the
batching) against the same broker, for a before/after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)

TOPIC = "bench-describe"
RECORDS = 100
COMMITS_PER_GROUP = 3
WAIT_S = 600.0


def setup(bootstrap: str, groups: int, partitions: int) -> dict[str, dict[int, int]]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(WAIT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0, "linger.ms": 5})
    for p in range(partitions):
        for i in range(RECORDS):
            producer.produce(TOPIC, value=b"v%d" % i, partition=p)
    assert producer.flush(WAIT_S) == 0
    expected: dict[str, dict[int, int]] = {}
    for round_ in range(COMMITS_PER_GROUP):
        futures = []
        for g in range(groups):
            group = f"bench-group-{g:05d}"
            offsets = {p: min(RECORDS, (g * 7 + p * 13) % RECORDS + round_) for p in range(partitions)}
            expected[group] = offsets
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(TOPIC, p, o) for p, o in offsets.items()])
            futures.append(admin.alter_consumer_group_offsets([request], request_timeout=60)[group])
        for future in futures:
            future.result(WAIT_S)
    return expected


def describe(bootstrap: str, src: str | None) -> tuple[float, float, list[dict]]:
    """(wall seconds, CPU seconds of the command, its answer)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tidemark.cli", "groups", "describe", "--all-groups", "--output",
                           "json", "--bootstrap-server", bootstrap, "--timeout", "120000"],
                          capture_output=True, env=env, timeout=WAIT_S, check=False)
    elapsed = time.monotonic() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu_after.ru_utime + cpu_after.ru_stime - cpu_before.ru_utime - cpu_before.ru_stime
    if done.returncode != 0:
        raise SystemExit(f"describe failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    return elapsed, cpu, json.loads(done.stdout)


def describe_in_process(bootstrap: str) -> tuple[float, list[dict]]:
    """The same command inside this process: no interpreter start, no imports."""
    from click.testing import CliRunner

    from tidemark.cli.groups import groups

    started = time.monotonic()
    result = CliRunner().invoke(groups, ["describe", "--all-groups", "--output", "json", "--bootstrap-server",
                                         bootstrap, "--timeout", "120000"], catch_exceptions=False)
    elapsed = time.monotonic() - started
    if result.exit_code != 0:
        raise SystemExit(f"describe failed ({result.exit_code}): {result.stderr[-2000:]}")
    return elapsed, json.loads(result.stdout)


def check(answer: list[dict], expected: dict[str, dict[int, int]]) -> None:
    got = {a["group"]: {row["partition"]: row["current_offset"] for row in a["partitions"]} for a in answer}
    if got != expected:
        wrong = sorted(g for g in expected if got.get(g) != expected[g])[:5]
        raise SystemExit(f"wrong answer for {len(wrong)}+ groups, e.g. {wrong}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", action="append", default=[],
                        help="another tree's src/ to time as well (repeatable)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"offsets.topic.num.partitions": "10"}).start()
        try:
            started = time.monotonic()
            expected = setup(broker.bootstrap, args.groups, args.partitions)
            print(f"{args.groups} groups x {args.partitions} partitions committed in {time.monotonic() - started:.1f} s")
            times = []
            for _ in range(args.repeats):
                elapsed, answer = describe_in_process(broker.bootstrap)
                check(answer, expected)
                times.append(elapsed)
            print(f"in process: describe --all-groups median {statistics.median(times):.2f} s "
                  f"(runs: {', '.join(f'{t:.2f}' for t in times)})")
            for src in [None, *args.src]:
                times, cpus = [], []
                for _ in range(args.repeats):
                    elapsed, cpu, answer = describe(broker.bootstrap, src)
                    check(answer, expected)
                    times.append(elapsed)
                    cpus.append(cpu)
                print(f"{src or 'this tree'}: describe --all-groups median {statistics.median(times):.2f} s wall, "
                      f"{statistics.median(cpus):.2f} s CPU (runs: {', '.join(f'{t:.2f}' for t in times)})")
        finally:
            try:
                broker.stop()
            finally:
                broker.kill()


if __name__ == "__main__":
    main()
