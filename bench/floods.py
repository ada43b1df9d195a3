"""Broker memory under client floods: RSS of a real broker process, from /proc/<pid>/status.

    python -m bench.floods [--connections N] [--fetches N] [--log-mib N] [--settle S]

Each scenario starts its own broker (127.0.0.1, free port, temporary data dir, default settings),
so VmHWM (the peak) is that scenario's own:

  partial frames  N connections each send 5 bytes: a size prefix just under
                  socket.request.max.bytes (100 MiB), then (a moment later, so it is a second
                  receive) one byte, then nothing.
  slow reader     a topic with a log of --log-mib MiB; one client pipelines --fetches Fetch
                  requests for all of it (max_bytes 64 MiB) and never reads a response.
  producer ids    placeholder (not measured here yet).

RSS is read once the broker is idle with its topic (before), and after --settle seconds of the
flood (during); the peak is VmHWM at that point. Everything is bounded: fixed counts, one settle
wait per scenario, loopback only; connections are closed and brokers stopped at the end.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.conftest import BrokerProcess  # noqa: E402
from tests.integration.raw import RawClient, encode_request, fetch_body  # noqa: E402
from tidemark.records.batch import build_batch  # noqa: E402

SOCKET_REQUEST_MAX_BYTES = 104857600
BATCH_VALUE = 1_000_000
FETCH = 1


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def partial_frames(tmp: Path, connections: int, settle: float) -> tuple[dict[str, int], dict[str, int]]:
    broker = BrokerProcess(tmp / "partial").start()
    sockets: list[socket.socket] = []
    try:
        time.sleep(settle)
        before = memory_kib(broker.process.pid)
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
            sock.sendall(struct.pack(">i", SOCKET_REQUEST_MAX_BYTES - 16))
            sockets.append(sock)
        # The byte comes in a second receive, after the broker has seen the prefix.
        time.sleep(settle)
        for sock in sockets:
            sock.sendall(b"x")
        time.sleep(settle)
        return before, memory_kib(broker.process.pid)
    finally:
        for sock in sockets:
            sock.close()
        broker.stop()


def slow_reader(tmp: Path, fetches: int, log_mib: int, settle: float) -> tuple[dict[str, int], dict[str, int]]:
    broker = BrokerProcess(tmp / "slow").start()
    slow = None
    try:
        with RawClient(broker.bootstrap) as client:
            assert client.create_topic("flood").error_code == 0
            batch = build_batch([(None, b"v" * BATCH_VALUE, (), 1)])
            for _ in range(log_mib * (1 << 20) // BATCH_VALUE):
                assert client.produce("flood", batch).error_code == 0
        time.sleep(settle)
        before = memory_kib(broker.process.pid)
        slow = socket.socket()
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(("127.0.0.1", broker.port))
        for i in range(fetches):
            payload = encode_request(FETCH, 11, i, fetch_body([("flood", 0, 0, 64 << 20)], max_bytes=64 << 20))
            slow.sendall(struct.pack(">i", len(payload)) + payload)
        time.sleep(settle)
        return before, memory_kib(broker.process.pid)
    finally:
        if slow is not None:
            slow.close()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=6, help="partial-frame connections (default 6)")
    parser.add_argument("--fetches", type=int, default=12, help="pipelined fetches of the slow reader (default 12)")
    parser.add_argument("--log-mib", type=int, default=32, help="log size the slow reader fetches (default 32)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds to let each flood take effect")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="tidemark-bench-floods-") as tmp_name:
        tmp = Path(tmp_name)
        before, during = partial_frames(tmp, args.connections, args.settle)
        rows.append((f"(a) {args.connections} connections x 5-byte partial frame", before, during))
        before, during = slow_reader(tmp, args.fetches, args.log_mib, args.settle)
        rows.append((f"(b) {args.fetches} pipelined fetches of a {args.log_mib} MiB log, never read", before, during))

    table = Table(title="broker memory under floods (MiB)")
    for column in ("scenario", "RSS before", "RSS during", "peak (VmHWM)"):
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for name, before, during in rows:
        table.add_row(name, f"{before['VmRSS'] / 1024:.0f}", f"{during['VmRSS'] / 1024:.0f}",
                      f"{during['VmHWM'] / 1024:.0f}")
    table.add_row("(d) producer-id flood", "-", "-", "-")
    Console(width=None if sys.stdout.isatty() else 120).print(table)


if __name__ == "__main__":
    main()
