"""The offset manager on a cluster: commit cost on RF=3 against one broker, and coordinator failover.

    python -m bench.coordinator [--seconds 5] [--repeats 3] [--records 1000000] [--cluster-set KEY=VALUE ...]

Cases, side by side in one run (same confluent-kafka client, all on 127.0.0.1):
  (a) commits on three brokers on ZooKeeper (offsets topic RF=3, min.insync.replicas=2) and on
      one embedded broker: single-partition synchronous commits paced at --paced-rate commits/s
      over 10 clients (latency from each commit's slot, bench.offsets' schedule), and one client
      committing --batch-partitions partitions per commit flat out; medians of --repeats.
      --cluster-set sets a broker setting on the three brokers of (a) only (e.g.
      offsets.standby.replay.enable=false, to see what the followers' standby replay costs).
  (b) failover: one offsets partition is filled with --records offset commit records (raw
      OffsetCommit requests of 1,000 partitions each, 1,000 keys; the log cleaner is off so the
      partition keeps them all), then its leader is SIGKILLed; time from the kill to the next
      acknowledged commit of a group on it (FindCoordinator and OffsetCommit retried every 10 ms
      over raw connections, so no client back-off is measured). The killed broker is restarted,
      and once back in the ISR the partition's leader gets SIGTERM (controlled shutdown), timed
      the same way. COORDINATOR_LOAD_IN_PROGRESS answers are counted, and the offsets read back
      after the failover must be the ones committed before it. With a broker that has
      offsets.standby.replay.enable, (b) runs with it true and false; otherwise once, and says so.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from rich.table import Table

from bench.offsets import BenchError, check_committed, run_clients
from bench.produce_fetch import console, out

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import BrokerProcess  # noqa: E402  (needs the repo root on sys.path)
from tests.integration.raw import RawClient  # noqa: E402
from tidemark.broker.config import BROKER_SETTINGS  # noqa: E402
from tidemark.coordinator.partitioner import partition_for  # noqa: E402
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available  # noqa: E402

SESSION_TIMEOUT_MS = 6000
OFFSETS_PARTITIONS = 10
STANDBY = "offsets.standby.replay.enable"
COMMON = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}
CLUSTER = {**COMMON, "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "replica.fetch.wait.max.ms": "100",
           "offsets.topic.replication.factor": "3"}
FILL_PARTITIONS = 1_000  # partitions per fill request, and keys of the filled offsets partition
FILL_CLIENTS = 3
FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 10, 8, 9
WAIT_S = 180.0  # bound of every wait
PACED_CLIENTS = 10


# ---------------------------------------------------------------------------------- (a) commits


def _create(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    configs = {"min.insync.replicas": "2"} if replication == 3 else {}
    admin.create_topics([NewTopic(topic, partitions, replication, config=configs)])[topic].result(60)


def commit_cases(bootstrap: str, replication: int, args) -> dict[str, list[float]]:
    """One repeat of the paced and the batched case; returns their figures."""
    tag = uuid.uuid4().hex[:8]
    paced_topic, batch_topic = f"paced-{tag}", f"batch-{tag}"
    _create(bootstrap, paced_topic, PACED_CLIENTS, replication)
    _create(bootstrap, batch_topic, args.batch_partitions, replication)
    paced, _ = run_clients(bootstrap, paced_topic, f"paced-{tag}", [[p] for p in range(PACED_CLIENTS)],
                           args.seconds, paced_rate=args.paced_rate)
    batched, last = run_clients(bootstrap, batch_topic, f"batch-{tag}", [list(range(args.batch_partitions))],
                                args.seconds)
    check_committed(bootstrap, batch_topic, f"batch-{tag}", last)
    # Every repeat measures the same cluster: a fetch's cost grows with the partitions it covers.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.delete_topics([paced_topic, batch_topic]).values():
        future.result(60)
    return {"paced/s": paced.ops_per_s, "paced p50": paced.p(0.5), "paced p99": paced.p(0.99),
            "batched offsets/s": batched.items_per_s, "batched p99": batched.p(0.99)}


# --------------------------------------------------------------------------------- (b) failover


def _group_on(partition: int) -> str:
    return next(g for g in (f"failover-{i}" for i in range(10_000)) if partition_for(g, OFFSETS_PARTITIONS) == partition)


def _commit_body(group: str, topic: str, offsets: dict[int, int]) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": None}
                for p, o in offsets.items()]}]}


def _codes(response) -> set[ErrorCode]:
    return {p.error_code for t in response.topics for p in t.partitions}


class Cluster:
    def __init__(self, tmp: Path, settings: dict[str, str]) -> None:
        self.zookeeper = ZooKeeperServer(tmp / "zookeeper", force_sync=True).start()
        settings = {**CLUSTER, **settings, "zookeeper.connect": self.zookeeper.connect}
        self.brokers = {i: BrokerProcess(tmp / f"broker-{i}", {**settings, "broker.id": str(i)}).start()
                        for i in (1, 2, 3)}
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())

    def live(self, but: int | None = None) -> dict[int, BrokerProcess]:
        return {i: b for i, b in self.brokers.items()
                if i != but and b.process is not None and b.process.poll() is None}

    def partition(self, topic: str, index: int):
        admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap for b in self.live().values()), "log_level": 0})
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[index]

    def until(self, condition, what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                if condition():
                    return
            except Exception:  # noqa: BLE001 - a broker down or busy: ask again
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"not within {WAIT_S}s: {what}")
            time.sleep(0.1)

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.kill()
        self.zookeeper.stop()


def _fill(cluster: Cluster, group: str, topic: str, records: int) -> dict[int, int]:
    """`records` commit records on the group's offsets partition, FILL_CLIENTS raw clients at
    once; returns the last offset committed per partition."""
    requests = records // FILL_PARTITIONS
    counter = iter(range(requests))
    lock = threading.Lock()
    errors: list[str] = []

    def client() -> None:
        coordinator = _find(cluster, group, but=None)
        with RawClient(cluster.brokers[coordinator].bootstrap) as raw:
            while True:
                with lock:
                    n = next(counter, None)
                if n is None or errors:
                    return
                response = raw.request(OFFSET_COMMIT, 8, _commit_body(group, topic, {
                    p: n * FILL_PARTITIONS + p for p in range(FILL_PARTITIONS)}))
                if _codes(response) != {ErrorCode.none}:
                    errors.append(str(_codes(response)))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(FILL_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 5)
    if errors or any(t.is_alive() for t in threads):
        raise BenchError(f"fill failed: {errors[:3]}")
    # Concurrent requests may commit in any order: the last value per partition is what the log says.
    return _fetch(cluster, group, topic)


def _find(cluster: Cluster, group: str, but: int | None) -> int:
    """The coordinator as a running broker names it (not `but`), or -1."""
    for broker in cluster.live(but).values():
        try:
            with RawClient(broker.bootstrap) as raw:
                found = raw.request(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        except OSError:
            continue
        if found.error_code == ErrorCode.none and found.node_id in cluster.live(but):
            return found.node_id
    return -1


def _fetch(cluster: Cluster, group: str, topic: str) -> dict[int, int]:
    coordinator = _find(cluster, group, None)
    with RawClient(cluster.brokers[coordinator].bootstrap) as raw:
        response = raw.request(OFFSET_FETCH, 7, {"group_id": group, "require_stable": False, "topics": None})
    return {p.partition_index: p.committed_offset for t in response.topics if t.name == topic for p in t.partitions}


def _next_commit(cluster: Cluster, group: str, topic: str, failed: int | None, value: int) -> tuple[float, int]:
    """Commit until one is acknowledged by a broker other than `failed`: (seconds, load-in-progress answers)."""
    started = time.perf_counter()
    loading = 0
    while time.perf_counter() - started < WAIT_S:
        coordinator = _find(cluster, group, but=failed)
        if coordinator != -1:
            try:
                with RawClient(cluster.brokers[coordinator].bootstrap) as raw:
                    codes = _codes(raw.request(OFFSET_COMMIT, 8, _commit_body(group, topic, {0: value})))
            except OSError:
                codes = set()
            if codes == {ErrorCode.none}:
                return time.perf_counter() - started, loading
            loading += ErrorCode.coordinator_load_in_progress in codes
        time.sleep(0.01)
    raise BenchError(f"no acknowledged commit within {WAIT_S}s of the failure")


def failover(tmp: Path, records: int, standby: bool | None) -> dict[str, float]:
    settings = {"log.cleaner.enable": "false"}
    if standby is not None:
        settings[STANDBY] = str(standby).lower()
    cluster = Cluster(tmp, settings)
    try:
        topic = "filled"
        _create(cluster.bootstrap, topic, FILL_PARTITIONS, 1)
        index = 0
        group = _group_on(index)
        # The first commit waits out the offsets topic's first elections (a broker named leader
        # by the others answers NOT_COORDINATOR until its own view has it lead).
        _next_commit(cluster, group, topic, None, 0)
        filled = time.perf_counter()
        expected = _fill(cluster, group, topic, records)
        fill_s = time.perf_counter() - filled
        console.print(f"  filled __consumer_offsets-{index} with {records:,} records in {fill_s:.1f}s")
        cluster.until(lambda: len(cluster.partition("__consumer_offsets", index).isrs) == 3, "three in-sync replicas")

        leader = cluster.partition("__consumer_offsets", index).leader
        cluster.brokers[leader].kill()
        kill_s, kill_loading = _next_commit(cluster, group, topic, leader, 1)
        expected[0] = 1
        if _fetch(cluster, group, topic) != expected:
            raise BenchError("the offsets after the SIGKILL failover differ from those committed before it")
        cluster.brokers[leader].start()
        cluster.until(lambda: len(cluster.partition("__consumer_offsets", index).isrs) == 3, "the killed broker back in the ISR")

        leader = cluster.partition("__consumer_offsets", index).leader
        cluster.brokers[leader].process.send_signal(signal.SIGTERM)
        term_s, term_loading = _next_commit(cluster, group, topic, leader, 2)
        if cluster.brokers[leader].process.wait(timeout=WAIT_S) != 0:
            raise BenchError("the SIGTERMed broker did not stop cleanly")
        expected[0] = 2
        if _fetch(cluster, group, topic) != expected:
            raise BenchError("the offsets after the SIGTERM failover differ from those committed before it")
        return {"fill s": fill_s, "kill s": kill_s, "kill loading": kill_loading,
                "term s": term_s, "term loading": term_loading}
    finally:
        cluster.close()


# ------------------------------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paced-rate", type=float, default=1000.0)
    parser.add_argument("--batch-partitions", type=int, default=100)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--skip", choices=["commits", "failover"], action="append", default=[])
    parser.add_argument("--cluster-set", metavar="KEY=VALUE", action="append", default=[],
                        help="a broker setting for the three brokers of the commit cases")
    args = parser.parse_args()
    cluster_settings = dict(setting.split("=", 1) for setting in args.cluster_set)
    if not zookeeper_available():
        raise SystemExit("ZooKeeper is not installed (make system-deps)")
    modes: list[bool | None] = [True, False] if STANDBY in BROKER_SETTINGS else [None]
    figures: dict[str, dict[str, list[float]]] = {}
    failovers: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        if "commits" not in args.skip:
            cluster = Cluster(tmp / "commits", cluster_settings)
            single = BrokerProcess(tmp / "single", COMMON).start()
            try:
                for repeat in range(args.repeats):
                    for case, bootstrap, replication in (("RF=3, 3 brokers", cluster.bootstrap, 3),
                                                         ("RF=1, 1 broker", single.bootstrap, 1)):
                        for name, value in commit_cases(bootstrap, replication, args).items():
                            figures.setdefault(case, {}).setdefault(name, []).append(value)
                    console.print(f"repeat {repeat + 1}/{args.repeats} done")
            finally:
                cluster.close()
                single.kill()
        if "failover" not in args.skip:
            for standby in modes:
                label = {True: f"{STANDBY}=true", False: f"{STANDBY}=false",
                         None: f"load on election ({STANDBY} not in this broker)"}[standby]
                console.print(f"failover: {label}")
                failovers[label] = failover(tmp / f"failover-{standby}", args.records, standby)

    if figures:
        set_on = "".join(f", {key}={value}" for key, value in cluster_settings.items())
        table = Table(title=f"commits, median of {args.repeats} x {args.seconds:g} s{set_on}")
        columns = ["paced/s", "paced p50", "paced p99", "batched offsets/s", "batched p99"]
        for column in ["case", *[c + (" ms" if "p5" in c or "p9" in c else "") for c in columns]]:
            table.add_column(column)
        medians = {case: {c: statistics.median(v[c]) for c in columns} for case, v in figures.items()}
        for case, values in medians.items():
            table.add_row(case, *[f"{values[c]:,.2f}" if c.split()[-1] in ("p50", "p99") else f"{values[c]:,.0f}"
                                  for c in columns])
        rf3, rf1 = medians["RF=3, 3 brokers"], medians["RF=1, 1 broker"]
        table.add_row("RF=3 / RF=1", f"{rf3['paced/s'] / rf1['paced/s']:.2f}x", f"{rf3['paced p50'] / rf1['paced p50']:.2f}x",
                      f"{rf3['paced p99'] / rf1['paced p99']:.2f}x",
                      f"{rf3['batched offsets/s'] / rf1['batched offsets/s']:.2f}x",
                      f"{rf3['batched p99'] / rf1['batched p99']:.2f}x")
        out.print(table)
    if failovers:
        table = Table(title=f"failover of an offsets partition of {args.records:,} records "
                            f"(session timeout {SESSION_TIMEOUT_MS} ms)")
        for column in ("standby", "SIGKILL -> commit s", "LOAD_IN_PROGRESS", "SIGTERM -> commit s", "LOAD_IN_PROGRESS "):
            table.add_column(column)
        for label, f in failovers.items():
            table.add_row(label, f"{f['kill s']:.2f}", f"{f['kill loading']:.0f}", f"{f['term s']:.2f}",
                          f"{f['term loading']:.0f}")
        out.print(table)


if __name__ == "__main__":
    main()
