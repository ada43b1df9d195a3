"""The broker's fixed cost per request on the commit path, without a Kafka client in the way.

    python -m bench.request_path [--connections N] [--in-flight K] [--seconds S] [--runs R]
                                 [--targets tidemark,mock] [--version 8]

A raw-socket load generator (a separate process, one thread, non-blocking sockets) sends
pre-encoded single-partition OffsetCommit frames (v8 by default, the simple-consumer form:
generation -1, no member) over N connections, each keeping K requests in flight, for a bounded
time and count. Per target and run it reports commits/s and the target's CPU seconds per commit
(utime + stime from /proc, and the stime part alone: the tidemark broker's process; for librdkafka's mock cluster, which
runs in this process's threads while the generator runs in its own, this process). Targets
alternate run by run; the table gives each one's median of --runs. Every answer's correlation id
is checked against the connection's request order, and every 256th answer's error code is read
(a commit answered with an error fails the run).

tidemark runs as `python -m bench.offsets` runs it (durable: each commit is fsync'd before it is
answered); the mock keeps commits in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import selectors
import socket
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.offsets import TidemarkOffsetsTarget
from bench.produce_fetch import BenchError, MockTarget, console, out
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.client import decode_response, encode_request

MAX_COMMITS = 5_000_000  # every run is bounded in count as well as in time
CHECK_EVERY = 256  # answers whose body is decoded and checked
TOPIC = "request-path"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime + stime, stime) of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[12]) / CLK_TCK


def commit_body(group: str, partition: int, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                       "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def _request(sock: socket.socket, api_key: int, version: int, body: dict) -> object:
    payload = encode_request(api_key, version, 1, body, client_id="request-path")
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise BenchError("connection closed during warm-up")
        data += chunk
    return decode_response(api_key, version, data[4:])[1]


def warm_up(bootstrap: str, group: str, version: int, deadline_s: float = 60) -> None:
    """Until the group's coordinator is loaded and answers a commit without error."""
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + deadline_s
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        while True:
            found = _request(sock, ApiKey.FIND_COORDINATOR, 2, {"key": group, "key_type": 0})
            answer = _request(sock, ApiKey.OFFSET_COMMIT, version, commit_body(group, 0, 0))
            code = answer.topics[0].partitions[0].error_code
            if found.error_code == 0 and code == 0:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{bootstrap}: commits still fail ({found.error_code}, {code}) after {deadline_s} s")
            time.sleep(0.2)


def generate(bootstrap: str, group: str, version: int, connections: int, in_flight: int, seconds: float,
             partitions: int) -> tuple[int, float]:
    """Run the load; (commits answered, seconds). Runs in its own process."""
    host, port = bootstrap.rsplit(":", 1)
    selector = selectors.DefaultSelector()
    states = []
    for index in range(connections):
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        # One frame per connection, its correlation id rewritten per request (header offset 8).
        frame = bytearray(struct.pack(">i", 0) + encode_request(
            ApiKey.OFFSET_COMMIT, version, 0, commit_body(group, index % partitions, index), client_id="request-path"))
        struct.pack_into(">i", frame, 0, len(frame) - 4)
        state = {"sock": sock, "frame": frame, "sent": 0, "answered": 0, "buffer": bytearray()}
        states.append(state)
        selector.register(sock, selectors.EVENT_READ, state)

    def send(state: dict, count: int) -> None:
        frame, out_buffer = state["frame"], bytearray()
        for _ in range(count):
            state["sent"] += 1
            struct.pack_into(">i", frame, 8, state["sent"])
            out_buffer += frame
        state["sock"].setblocking(True)
        state["sock"].sendall(out_buffer)
        state["sock"].setblocking(False)

    started = time.perf_counter()
    ends = started + seconds
    total = 0
    for state in states:
        send(state, in_flight)
    stopping = False
    while True:
        now = time.perf_counter()
        if not stopping and (now >= ends or total >= MAX_COMMITS):
            stopping = True  # no more sends: collect what is in flight
        if stopping and all(s["answered"] == s["sent"] for s in states):
            break
        if now > ends + 60:
            raise BenchError(f"{bootstrap}: answers still missing 60 s after the end")
        for key, _ in selector.select(1.0):
            state = key.data
            chunk = state["sock"].recv(1 << 20)
            if not chunk:
                raise BenchError(f"{bootstrap}: connection closed by the target")
            buffer = state["buffer"]
            buffer += chunk
            position, answered = 0, 0
            while len(buffer) - position >= 4:
                size = struct.unpack_from(">i", buffer, position)[0]
                if len(buffer) - position - 4 < size:
                    break
                correlation_id = struct.unpack_from(">i", buffer, position + 4)[0]
                expected = state["answered"] + 1
                if correlation_id != expected:
                    raise BenchError(f"{bootstrap}: answer {correlation_id} where {expected} was due")
                if expected % CHECK_EVERY == 0:
                    body = decode_response(ApiKey.OFFSET_COMMIT, version, bytes(buffer[position + 4:position + 4 + size]))[1]
                    code = body.topics[0].partitions[0].error_code
                    if code != 0:
                        raise BenchError(f"{bootstrap}: commit answered with error {code}")
                state["answered"] = expected
                answered += 1
                position += 4 + size
            del buffer[:position]
            total += answered
            if answered and not stopping:
                send(state, answered)
    elapsed = time.perf_counter() - started
    for state in states:
        state["sock"].close()
    return total, elapsed


@dataclass
class Run:
    commits: int
    seconds: float
    cpu_seconds: float
    system_seconds: float  # of which in the kernel (socket calls, writes, fsyncs)

    @property
    def per_second(self) -> float:
        return self.commits / self.seconds

    @property
    def cpu_us_per_commit(self) -> float:
        return self.cpu_seconds / self.commits * 1e6

    @property
    def system_us_per_commit(self) -> float:
        return self.system_seconds / self.commits * 1e6


def run_once(target, pid: int, group: str, args: argparse.Namespace) -> Run:
    warm_up(target.bootstrap, group, args.version)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        # Started before the CPU clock: the pool's start-up is not the target's.
        pool.apply(time.sleep, (0,))
        cpu_before = cpu_seconds(pid)
        commits, seconds = pool.apply(generate, (target.bootstrap, group, args.version, args.connections,
                                                 args.in_flight, args.seconds, args.partitions))
        cpu_after = cpu_seconds(pid)
    return Run(commits, seconds, cpu_after[0] - cpu_before[0], cpu_after[1] - cpu_before[1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--in-flight", type=int, default=1, help="requests each connection keeps in flight")
    parser.add_argument("--partitions", type=int, default=20, help="partitions of the topic (connection i commits i %% P)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--version", type=int, default=8, choices=(8, 9))
    parser.add_argument("--targets", default="tidemark,mock")
    args = parser.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    if set(args.targets) - {"tidemark", "mock"}:
        parser.error("--targets takes tidemark and/or mock")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: dict[str, list[Run]] = {name: [] for name in args.targets}
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-request-path-") as tmp, contextlib.ExitStack() as stack:
        targets = {}
        for name in args.targets:
            target = TidemarkOffsetsTarget(Path(tmp)) if name == "tidemark" else MockTarget()
            stack.enter_context(contextlib.closing(target))
            target.create_topic(TOPIC, args.partitions, 30)
            targets[name] = (target, target.pid if name == "tidemark" else os.getpid())
            console.print(f"{name}: {target.bootstrap}")
        for index in range(args.runs):
            for name, (target, pid) in targets.items():
                run = run_once(target, pid, f"request-path-{index}", args)
                runs[name].append(run)
                console.print(f"  {name} run {index + 1}: {run.per_second:,.0f} commits/s, "
                              f"{run.cpu_us_per_commit:,.0f} us CPU/commit, {run.system_us_per_commit:,.0f} in the "
                              f"kernel ({run.commits:,} commits)")
    load = os.getloadavg()[0]
    table = Table(title=f"OffsetCommit v{args.version}, {args.connections} connections x {args.in_flight} in flight, "
                        f"{args.seconds:g} s, median of {args.runs} (load {load:.2f})")
    table.add_column("target")
    table.add_column("commits/s", justify="right")
    table.add_column("CPU us/commit", justify="right")
    table.add_column("of which kernel", justify="right")
    medians = {}
    for name, done in runs.items():
        medians[name] = (statistics.median(r.per_second for r in done), statistics.median(r.cpu_us_per_commit for r in done),
                         statistics.median(r.system_us_per_commit for r in done))
        table.add_row(name, *(f"{value:,.0f}" for value in medians[name]))
    if len(medians) == 2:
        (t_rate, t_cpu, _), (m_rate, m_cpu, _) = medians["tidemark"], medians["mock"]
        table.add_row("tidemark/mock", f"{t_rate / m_rate:.2f}x", f"{t_cpu / m_cpu:.1f}x", "")
    out.print(table)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as error:
        console.print(f"[red]benchmark failed: {error}")
        sys.exit(1)
