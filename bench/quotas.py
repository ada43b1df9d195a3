"""The crazy consumer: one client committing offsets as fast as it can next to ten well-behaved
groups, without and with a request_percentage quota on its client id.

    python -m bench.quotas [--seconds S] [--quota PERCENT] [--repeat N] [--rate N] [--in-flight N]

One tidemark broker (a child process, default settings but group.initial.rebalance.delay.ms=0;
commits are durable: fsynced before they are answered). Ten well-behaved groups, each a
confluent-kafka Consumer (assign() only) in a thread of this process, commit one partition
synchronously --rate times a second each, on a fixed schedule; a commit's latency is measured
from its scheduled time, so one sent late counts its lateness. The crazy consumer runs in a
process of its own, started --warmup seconds before the measured commits (longer than the
quota windows' span, so they see its steady state): a raw Kafka-protocol client (client id "crazy-consumer") that keeps
--in-flight OffsetCommits outstanding on one connection, sending the next as each is answered.
It does not back off by itself: only the broker's mute (KIP-219) slows it. It sends frames
encoded once (only the correlation id and offset patched in) and reads only the throttle time
and error code of each answer, so that its own CPU, on the same cores as the broker, stays small
next to what it costs the broker (in Kafka's setting the client is on another machine);
--crazy-client kio encodes and decodes every request with kio instead.

Three runs of --seconds each: the well-behaved groups alone; with the crazy consumer; with the
crazy consumer under request_percentage=--quota (set with AlterClientQuotas on its client id,
removed again after the run); the three are repeated --repeat times, interleaved, so each
repetition sees the machine alike. The table gives each run's well-behaved commits' p50/p99 and
their p99 against the same repetition's run alone, the crazy consumer's commits/s, the share of
its answers that were throttled and its process's CPU; then the medians over the repetitions.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)
from tidemark.wire.client import decode_response, encode_request  # noqa: E402

console = Console(width=160)
TOPIC = "quota-bench"
GROUPS = 10
OFFSET_COMMIT, COMMIT_VERSION = 8, 8
ALTER_CLIENT_QUOTAS = 49
CRAZY_CLIENT_ID = "crazy-consumer"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- the well-behaved groups ---------------------------------------------------------------------


def well_behaved(bootstrap: str, seconds: float, rate: float, run: str) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()

    def group(index: int) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"calm-{run}-{index}",
                             "enable.auto.commit": False})
        try:
            partition = TopicPartition(TOPIC, index)
            consumer.assign([partition])
            consumer.commit(offsets=[TopicPartition(TOPIC, index, 0)], asynchronous=False)  # connected
            start = time.monotonic()
            mine = []
            for i in range(int(seconds * rate)):
                scheduled = start + i / rate
                delay = scheduled - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                consumer.commit(offsets=[TopicPartition(TOPIC, index, i + 1)], asynchronous=False)
                mine.append(time.monotonic() - scheduled)
            with lock:
                latencies.extend(mine)
        finally:
            consumer.close()

    threads = [threading.Thread(target=group, args=(i,)) for i in range(GROUPS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    return latencies


# -- the crazy consumer -------------------------------------------------------------------------


_OFFSET_SENTINEL = 0x5EED_0FF5_E75E_ED00  # found in the encoded template, replaced per request
_pack_i32, _pack_i64 = struct.Struct(">i").pack, struct.Struct(">q").pack


def _commit_body(offset: int) -> dict:
    return {"group_id": "crazy", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": None}]}]}


async def _crazy_frames(host: str, port: int, seconds: float, in_flight: int) -> tuple[int, float, int]:
    """The crazy consumer, cheap on CPU: one OffsetCommit v8 encoded once, its correlation id and
    offset patched in; of each answer only the throttle time and the partition's error code are
    read (at their places in a one-partition v8 response), the first answer checked against kio."""
    reader, writer = await asyncio.open_connection(host, port)
    template = encode_request(OFFSET_COMMIT, COMMIT_VERSION, 0, _commit_body(_OFFSET_SENTINEL),
                              client_id=CRAZY_CLIENT_ID)
    at = template.index(_pack_i64(_OFFSET_SENTINEL))
    head, tail = template[:4], template[at + 8:]
    middle = template[8:at]
    frame_size = _pack_i32(len(template))
    sent = answered = throttled = 0
    throttle_ms = 0.0
    errors: collections.Counter[int] = collections.Counter()
    deadline = time.monotonic() + seconds

    def send() -> None:
        nonlocal sent
        sent += 1
        writer.write(b"".join((frame_size, head, _pack_i32(sent), middle, _pack_i64(sent), tail)))

    for _ in range(in_flight):
        send()
    while answered < sent:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        payload = await reader.readexactly(size)
        # v8 answers: correlation id, empty header tags, throttle_time_ms; the partition's error
        # code sits before the partition's, topic's and response's empty tags.
        ms, = struct.unpack_from(">i", payload, 5)
        error, = struct.unpack_from(">h", payload, len(payload) - 5)
        if not answered:
            _, body = decode_response(OFFSET_COMMIT, COMMIT_VERSION, payload)
            assert (body.throttle_time.total_seconds() * 1000, body.topics[0].partitions[0].error_code) == (ms, error)
        answered += 1
        if error:
            errors[error] += 1
        if ms:
            throttled += 1
            throttle_ms += ms
        if time.monotonic() < deadline:
            send()
    writer.close()
    if errors:
        console.print(f"crazy consumer's errors: {dict(errors)}")
    return answered, throttle_ms, throttled


async def _crazy(host: str, port: int, seconds: float, in_flight: int) -> tuple[int, float, int]:
    """The crazy consumer encoding and decoding every request with kio (--crazy-client kio)."""
    reader, writer = await asyncio.open_connection(host, port)
    sent = answered = throttled = 0
    throttle_ms = 0.0
    errors: collections.Counter[str] = collections.Counter()
    deadline = time.monotonic() + seconds

    def send() -> None:
        nonlocal sent
        sent += 1
        payload = encode_request(OFFSET_COMMIT, COMMIT_VERSION, sent, _commit_body(sent), client_id=CRAZY_CLIENT_ID)
        writer.write(struct.pack(">i", len(payload)) + payload)

    for _ in range(in_flight):
        send()
    while answered < sent:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, body = decode_response(OFFSET_COMMIT, COMMIT_VERSION, await reader.readexactly(size))
        answered += 1
        errors.update(p.error_code.name for t in body.topics for p in t.partitions if p.error_code != 0)
        ms = body.throttle_time.total_seconds() * 1000
        if ms:
            throttled += 1
            throttle_ms += ms
        if time.monotonic() < deadline:
            send()
    writer.close()
    if errors:
        console.print(f"crazy consumer's errors: {dict(errors)}")
    return answered, throttle_ms, throttled


def _crazy_process(bootstrap: str, seconds: float, in_flight: int, results: multiprocessing.Queue,
                   client: str = "frames") -> None:
    host, port = bootstrap.rsplit(":", 1)
    started = time.monotonic()
    crazy = _crazy_frames if client == "frames" else _crazy
    answered, throttle_ms, throttled = asyncio.run(crazy(host, int(port), seconds, in_flight))
    results.put((answered, time.monotonic() - started, throttle_ms, throttled, time.process_time()))


# -- runs -------------------------------------------------------------------------------------


def set_quota(bootstrap: str, percent: float | None) -> None:
    """request_percentage on the crazy consumer's client id (None: removed)."""
    host, port = bootstrap.rsplit(":", 1)

    async def alter() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        payload = encode_request(ALTER_CLIENT_QUOTAS, 1, 1, {"entries": [{
            "entity": [{"entity_type": "client-id", "entity_name": CRAZY_CLIENT_ID}],
            "ops": [{"key": "request_percentage", "value": percent or 0.0, "remove": percent is None}]}],
            "validate_only": False})
        writer.write(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        _, body = decode_response(ALTER_CLIENT_QUOTAS, 1, await reader.readexactly(size))
        assert body.entries[0].error_code == 0, body
        writer.close()

    asyncio.run(alter())


def run_case(bootstrap: str, run: str, args: argparse.Namespace, crazy: bool) -> dict:
    spawn = multiprocessing.get_context("spawn")  # no librdkafka threads forked
    results = spawn.Queue()
    process = None
    if crazy:
        process = spawn.Process(
            target=_crazy_process, args=(bootstrap, args.warmup + args.seconds + 2, args.in_flight, results,
                                         args.crazy_client))
        process.start()
        # Measured in the steady state: a new client may spend its quota over the whole span of
        # the windows at once (as in Kafka) before its first throttle.
        time.sleep(args.warmup)
    latencies = well_behaved(bootstrap, args.seconds, args.rate, run)
    row = {"run": run, "commits": len(latencies), "p50": percentile(latencies, 0.5),
           "p99": percentile(latencies, 0.99), "max": max(latencies)}
    if process is not None:
        answered, elapsed, throttle_ms, throttled, cpu_s = results.get(timeout=args.seconds + 120)
        process.join(60)
        row.update(crazy_rate=answered / elapsed, throttled=throttled / max(answered, 1), throttle_ms=throttle_ms,
                   crazy_cpu=cpu_s / elapsed)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=20, help="commits/s of each well-behaved group")
    parser.add_argument("--quota", type=float, default=10, help="the crazy consumer's request_percentage")
    parser.add_argument("--in-flight", type=int, default=32, help="the crazy consumer's outstanding commits")
    parser.add_argument("--warmup", type=float, default=15, help="seconds the crazy consumer runs before measuring")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions of the three runs (medians reported)")
    parser.add_argument("--crazy-client", choices=("frames", "kio"), default="frames",
                        help="frames: pre-encoded requests (cheap); kio: every request encoded and decoded")
    args = parser.parse_args(argv)
    labels = {"alone": "no crazy consumer", "crazy": "crazy, no quota", "quota": f"crazy, request_percentage={args.quota:g}"}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, num_partitions=GROUPS, replication_factor=1)])[TOPIC].result(60)
            for repetition in range(args.repeat):
                alone = run_case(broker.bootstrap, f"alone{repetition}", args, crazy=False)
                crazy = run_case(broker.bootstrap, f"crazy{repetition}", args, crazy=True)
                set_quota(broker.bootstrap, args.quota)
                quota = run_case(broker.bootstrap, f"quota{repetition}", args, crazy=True)
                set_quota(broker.bootstrap, None)
                for kind, row in (("alone", alone), ("crazy", crazy), ("quota", quota)):
                    rows.append({**row, "kind": kind, "repetition": repetition, "ratio": row["p99"] / alone["p99"]})
                console.print(_table(f"Repetition {repetition + 1}", rows[-3:], labels, args))
            admin = None  # closed before its broker goes
        finally:
            broker.stop()
    medians = []
    for kind in ("alone", "crazy", "quota"):
        mine = [r for r in rows if r["kind"] == kind]
        median = {key: statistics.median(r[key] for r in mine) for key in mine[0] if isinstance(mine[0][key], float)}
        medians.append({**median, "kind": kind, "commits": sum(r["commits"] for r in mine), "repetition": "median"})
    console.print(_table(f"Medians of {args.repeat} repetitions", medians, labels, args))
    return 0


def _table(title: str, rows: list[dict], labels: dict[str, str], args: argparse.Namespace) -> Table:
    table = Table(title=f"{title}: ten groups' commits ({args.rate:g}/s each, {args.seconds:g} s) next to the crazy "
                        f"consumer ({args.in_flight} in flight, {args.crazy_client} client)")
    for column in ("run", "commits", "p50 ms", "p99 ms", "max ms", "p99 / alone", "crazy commits/s",
                   "crazy throttled", "crazy client CPU"):
        table.add_column(column, justify="right")
    for row in rows:
        crazy = "crazy_rate" in row
        table.add_row(labels[row["kind"]], str(row["commits"]), f"{row['p50'] * 1000:.1f}", f"{row['p99'] * 1000:.1f}",
                      f"{row['max'] * 1000:.1f}", f"{row['ratio']:.2f}x",
                      f"{row['crazy_rate']:.0f}" if crazy else "-", f"{row['throttled']:.0%}" if crazy else "-",
                      f"{row['crazy_cpu']:.0%}" if crazy else "-")
    return table


if __name__ == "__main__":
    sys.exit(main())
