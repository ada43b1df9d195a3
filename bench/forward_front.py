"""Prototype (bench only): a front process that hands each request to the worker owning its group.

    python -m bench.forward_front --listen HOST:PORT --workers HOST:PORT[,HOST:PORT...]

What a multi-process broker's listener process would do for coordinator requests, and no more:
read a frame, read its header and group id (not the body), pick the worker that owns the
group's offsets partition (partition_for(group, 50) % workers), write the frame to that worker,
and write the worker's answer back to the client in the client's request order. Requests with
no group (Metadata, ApiVersions, ...) go to worker 0; CreateTopics goes to every worker (each
worker is a whole broker here, so each must know the topic) and worker 0's answer is returned.

The workers are ordinary tidemark brokers advertising the front's address, reached over
loopback TCP (one connection per client connection and worker), which is what a Unix
socketpair to a worker process would cost, give or take the loopback's TCP bookkeeping. Not a
design to ship: no SASL/TLS, no failure handling; bench.multicore measures its CPU per request.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import deque
from pathlib import Path

from tidemark.coordinator.partitioner import partition_for
from tidemark.wire.primitives import Reader

OFFSETS_PARTITIONS = 50
CREATE_TOPICS = 19
# api key -> first flexible version, for the requests whose body starts with the group id
# (FindCoordinator and OffsetFetch read theirs below: their layout changed across versions).
GROUP_FIRST = {8: 8, 11: 6, 12: 4, 13: 4, 14: 4}  # OffsetCommit, JoinGroup, Heartbeat, LeaveGroup, SyncGroup
FIND_COORDINATOR, OFFSET_FETCH = 10, 9
FLEXIBLE_FROM = {**GROUP_FIRST, FIND_COORDINATOR: 3, OFFSET_FETCH: 6}


def group_of(frame: bytes) -> str | None:
    """The group (or coordinator key) a request is about, read from its header and first fields."""
    api_key = int.from_bytes(frame[0:2], "big")
    version = int.from_bytes(frame[2:4], "big")
    if api_key not in GROUP_FIRST and api_key not in (FIND_COORDINATOR, OFFSET_FETCH):
        return None
    flexible = version >= FLEXIBLE_FROM[api_key]
    reader = Reader(frame, 8)  # past api key, version and correlation id
    reader.string(nullable=True)  # client_id
    if flexible:
        reader.skip_tagged_fields()  # the header's
    if api_key == FIND_COORDINATOR and version >= 4:
        if frame[reader.pos] != 0:  # key_type: only groups are sharded here
            return None
        reader.pos += 1
        reader.uvarint()  # coordinator_keys: the first one decides
    elif api_key == OFFSET_FETCH and version >= 8:
        reader.uvarint()  # groups: the first one decides
    return reader.compact_string() if flexible else reader.string()


class Upstream(asyncio.Protocol):
    """One client connection's connection to one worker: answers come back in send order."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.waiting: deque[list] = deque()  # slots, oldest first
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        done = False
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < 4 + size:
                break
            slot = self.waiting.popleft()
            slot[0] = bytes(buffer[:4 + size])
            del buffer[:4 + size]
            done = True
        if done:
            self.client.flush()

    def connection_lost(self, exc) -> None:
        if self.client.transport is not None:
            self.client.transport.close()


class ClientConnection(asyncio.Protocol):
    def __init__(self, workers: list[tuple[str, int]]) -> None:
        self.workers = workers
        self.upstreams: list[Upstream] = []
        self.pending: deque[list] = deque()  # [answer or None, discard?] in request order
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.pause_reading()
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        for host, port in self.workers:
            _, upstream = await loop.create_connection(lambda: Upstream(self), host, port)
            self.upstreams.append(upstream)
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if len(buffer) < 4 + size:
                break
            frame = bytes(buffer[:4 + size])
            del buffer[:4 + size]
            self._route(frame)

    def _route(self, frame: bytes) -> None:
        body = memoryview(frame)[4:]
        api_key = int.from_bytes(body[0:2], "big")
        if api_key == CREATE_TOPICS:
            targets = range(len(self.upstreams))
        else:
            group = group_of(body)
            targets = (0,) if group is None else (partition_for(group, OFFSETS_PARTITIONS) % len(self.upstreams),)
        for n, index in enumerate(targets):
            slot = [None, n > 0]
            upstream = self.upstreams[index]
            upstream.waiting.append(slot)
            self.pending.append(slot)
            upstream.transport.write(frame)

    def flush(self) -> None:
        out = []
        pending = self.pending
        while pending and pending[0][0] is not None:
            answer, discard = pending.popleft()
            if not discard:
                out.append(answer)
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def connection_lost(self, exc) -> None:
        for upstream in self.upstreams:
            upstream.transport.close()


async def serve(host: str, port: int, workers: list[tuple[str, int]]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ClientConnection(workers), host, port, reuse_address=True)
    stopped = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    async with server:
        await stopped.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forward_front")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--workers", required=True)
    args = parser.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    workers = [(h, int(p)) for h, p in (w.rsplit(":", 1) for w in args.workers.split(","))]
    asyncio.run(serve(host, int(port), workers))
    return 0


class FrontProcess:
    """The front and its worker brokers, as bench.multicore starts them."""

    def __init__(self, tmp: Path, workers: int = 2) -> None:
        from bench.offsets import TIDEMARK_SETTINGS
        from bench.produce_fetch import BrokerProcess
        from tests.conftest import free_port

        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        settings = {**TIDEMARK_SETTINGS, "advertised.listeners": f"PLAINTEXT://{self.bootstrap}"}
        tmp.mkdir(parents=True, exist_ok=True)
        self.brokers = [BrokerProcess(tmp / f"worker{i}-{uuid.uuid4().hex[:6]}", settings) for i in range(workers)]
        self.process: subprocess.Popen | None = None
        self.log_path = tmp / "front.log"

    def start(self) -> FrontProcess:
        try:
            for broker in self.brokers:
                broker.start()
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "bench.forward_front", "--listen", self.bootstrap,
                     "--workers", ",".join(b.bootstrap for b in self.brokers)],
                    stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())
            deadline = time.monotonic() + 30
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"front exited:\n{self.log_path.read_text()}")
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return self
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def worker_pids(self) -> list[int]:
        return [b.process.pid for b in self.brokers]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        for broker in self.brokers:
            try:
                if broker.process is not None:
                    broker.stop()
            finally:
                broker.kill()


if __name__ == "__main__":
    sys.exit(main())
