"""Producer-id flood and producer-state restart, against a real broker process.

    python -m bench.producer_ids [--batches N] [--restart-batches N] [--producers N]

Flood: one Produce request (v9, acks=1, one partition) of N one-record batches (default 200,000,
~13 MB), each idempotent (sequence 0, epoch 0). "fabricated ids": every batch has its own
producer id, none of them issued by the broker; "one issued id": the batches carry one id from
InitProducerId with consecutive sequences (a legitimate request, accepted). For each it reports
the broker's RSS (/proc VmRSS) before and after, the Produce round trip, its error code, and the
event-loop stall: the longest ApiVersions round trip seen by a second connection that pings
back-to-back while the flood is in the broker.

Restart: --producers issued ids write --restart-batches batches in total into a topic of 8 MiB
segments; then the broker is stopped cleanly (SIGTERM) or killed (SIGKILL) and restarted, and the
time to load the logs (the broker's logs_loaded line) is reported with the producer-state
snapshots in place and with them deleted first (a full scan of every segment, as before
snapshots existed); each case --repeat times, the fastest shown. Every start still reads every
segment's batch headers to rebuild offsets and indexes; the snapshot saves the producer-state
pass on top of that.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

from crc32c import crc32c
from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)
from tests.integration.raw import RawClient  # noqa: E402
from tidemark.log import LogConfig, UnifiedLog  # noqa: E402
from tidemark.records import build_batch  # noqa: E402

PRODUCE, API_VERSIONS, INIT_PRODUCER_ID = 0, 18, 22
FABRICATED_BASE = 1 << 40  # far above any id a fresh broker has issued
SEGMENT_BYTES = 8 << 20

out = Console(width=None if sys.stdout.isatty() else 150)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def init_producer_id(client: RawClient) -> int:
    response = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                    "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == 0, response
    return int(response.producer_id)


def batches(count: int, producer_ids: list[int] | int, first_sequence: int = 0) -> bytes:
    """count one-record batches: each its own producer id (a list), or one id counting sequences.
    Built from one template, patching producer id, sequence and CRC (fast enough for 200k)."""
    template = bytearray(build_batch([(None, b"v", (), int(time.time() * 1000))],
                                     producer_id=0, producer_epoch=0, base_sequence=0))
    out_buf = bytearray()
    for i in range(count):
        pid = producer_ids[i] if isinstance(producer_ids, list) else producer_ids
        seq = 0 if isinstance(producer_ids, list) else first_sequence + i
        struct.pack_into(">qhi", template, 43, pid, 0, seq)
        struct.pack_into(">I", template, 17, crc32c(memoryview(template)[21:]))
        out_buf += template
    return bytes(out_buf)


def produce(client: RawClient, topic: str, records: bytes, acks: int = 1) -> object:
    response = client.request(PRODUCE, 9, {"acks": acks, "timeout": 60000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def flood(broker: BrokerProcess, topic: str, records: bytes) -> dict[str, float]:
    """Send one Produce of `records`; ping with ApiVersions meanwhile; RSS and stall numbers."""
    assert broker.process is not None
    pid = broker.process.pid
    with RawClient(broker.bootstrap) as client, RawClient(broker.bootstrap) as pinger:
        pinger.request(API_VERSIONS, 3, {"client_software_name": "bench", "client_software_version": "1"})
        rss_before = rss_mib(pid)
        done = threading.Event()
        longest = [0.0]

        def ping() -> None:
            while not done.is_set():
                started = time.perf_counter()
                pinger.request(API_VERSIONS, 3, {"client_software_name": "bench", "client_software_version": "1"})
                longest[0] = max(longest[0], time.perf_counter() - started)

        thread = threading.Thread(target=ping)
        thread.start()
        started = time.perf_counter()
        response = produce(client, topic, records)
        elapsed = time.perf_counter() - started
        done.set()
        thread.join(timeout=60)
        rss_after = rss_mib(pid)
    return {"rss_before": rss_before, "rss_after": rss_after, "seconds": elapsed, "stall": longest[0],
            "error_code": int(response.error_code)}


def loaded_seconds(broker: BrokerProcess) -> float:
    """The last logs_loaded time the broker logged."""
    seconds = [json.loads(line)["seconds"] for line in broker.log_text().splitlines()
               if '"logs_loaded"' in line]
    return float(seconds[-1])


def restart_times(tmp: Path, total: int, producers: int, repeat: int) -> dict[tuple[str, bool], float]:
    broker = BrokerProcess(tmp / "restart").start()
    try:
        with RawClient(broker.bootstrap) as client:
            assert client.create_topic("restart", configs={"segment.bytes": str(SEGMENT_BYTES)}).error_code == 0
            ids = [init_producer_id(client) for _ in range(producers)]
        # A Produce request carries one batch per partition, so the million batches of issued ids
        # are written into the stopped broker's log directly, 20,000 per append.
        broker.stop()
        log = UnifiedLog.open(broker.data_dir / "restart-0", LogConfig(segment_bytes=SEGMENT_BYTES),
                              clean_shutdown=True)
        per_append = 20_000
        sequences = dict.fromkeys(ids, 0)
        for n in range(0, total, per_append):
            pid = ids[(n // per_append) % producers]
            count = min(per_append, total - n)
            log.append(batches(count, pid, sequences[pid]), now_ms=int(time.time() * 1000))
            sequences[pid] += count
        log.close()
        broker.start()
        results: dict[tuple[str, bool], float] = {}
        for _ in range(repeat):
            for how in ("clean", "SIGKILL"):
                for snapshots in (True, False):
                    if how == "clean":
                        broker.stop()
                    else:
                        broker.kill()
                    if not snapshots:
                        for path in (broker.data_dir / "restart-0").glob("*.snapshot"):
                            path.unlink()
                    broker.start()
                    seconds = loaded_seconds(broker)
                    results[(how, snapshots)] = min(seconds, results.get((how, snapshots), seconds))
        return results
    finally:
        broker.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=200_000, help="batches in the flood request")
    parser.add_argument("--restart-batches", type=int, default=1_000_000, help="batches written before restarts")
    parser.add_argument("--producers", type=int, default=50, help="issued producer ids writing them")
    parser.add_argument("--repeat", type=int, default=3, help="restarts per case (the fastest is shown)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tidemark-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        broker = BrokerProcess(tmp / "flood").start()
        try:
            with RawClient(broker.bootstrap) as client:
                assert client.create_topic("flood").error_code == 0
                issued = init_producer_id(client)
            fabricated = flood(broker, "flood", batches(args.batches, [FABRICATED_BASE + i for i in range(args.batches)]))
            legit = flood(broker, "flood", batches(args.batches, issued))
        finally:
            broker.stop()
            broker.kill()
        restarts = restart_times(tmp, args.restart_batches, args.producers, args.repeat)

    table = Table(title=f"Produce of {args.batches:,} one-record idempotent batches in one request")
    for column in ("producer ids", "error code", "RSS before MiB", "RSS after MiB", "Produce s", "longest ApiVersions s"):
        table.add_column(column, justify="right")
    for name, r in (("fabricated, distinct", fabricated), ("one issued id", legit)):
        table.add_row(name, str(r["error_code"]), f"{r['rss_before']:.0f}", f"{r['rss_after']:.0f}",
                      f"{r['seconds']:.2f}", f"{r['stall']:.2f}")
    out.print(table)
    table = Table(title=f"Log load at restart: {args.restart_batches:,} batches from {args.producers} producers, "
                        f"{SEGMENT_BYTES >> 20} MiB segments")
    for column in ("shutdown", "snapshots", "logs loaded in s"):
        table.add_column(column, justify="right")
    for (how, snapshots), seconds in restarts.items():
        table.add_row(how, "kept" if snapshots else "deleted", f"{seconds:.2f}")
    out.print(table)


if __name__ == "__main__":
    main()
