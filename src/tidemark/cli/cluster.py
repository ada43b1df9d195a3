"""`tidemark cluster`: a ZooKeeper cluster of tidemark brokers to try, and its status.

    tidemark cluster run [--brokers 3] [--first-port 9092] [--zookeeper-port 2181] [--dir tidemark-cluster]
    tidemark cluster status --bootstrap-server HOST:PORT

`run` starts ZooKeeper (Debian's zookeeper jar) and the brokers on 127.0.0.1, each a
`tidemark serve` process with broker.id 1..N and its data under --dir, prints how to reach them
and stops them all (SIGTERM: controlled shutdowns) on Ctrl-C. `status` asks any broker for the
cluster's brokers, controller and every partition's leader, ISR and offline replicas over the
Kafka protocol, and flags under-replicated partitions.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import click
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.table import Table

from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cluster() -> None:
    """A ZooKeeper cluster of tidemark brokers: run one, or show one's state."""


@cluster.command("run")
@click.option("--brokers", "count", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--first-port", default=9092, show_default=True, help="Broker N listens on first-port + N - 1.")
@click.option("--zookeeper-port", default=2181, show_default=True)
@click.option("--dir", "directory", default="tidemark-cluster", show_default=True, type=click.Path(path_type=Path))
def run(count: int, first_port: int, zookeeper_port: int, directory: Path) -> None:
    """Start ZooKeeper and COUNT brokers on 127.0.0.1; Ctrl-C stops them all."""
    console = Console()
    if not zookeeper_available():
        raise click.ClickException("ZooKeeper is not installed (make system-deps installs zookeeperd)")
    directory.mkdir(parents=True, exist_ok=True)
    zookeeper = ZooKeeperServer(directory / "zookeeper", port=zookeeper_port, force_sync=True).start()
    brokers: list[subprocess.Popen[bytes]] = []
    try:
        for broker_id in range(1, count + 1):
            port = first_port + broker_id - 1
            log = open(directory / f"broker-{broker_id}.log", "ab")
            brokers.append(subprocess.Popen(
                [sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{port}",
                 "--data-dir", str(directory / f"broker-{broker_id}"), "--log-format", "json",
                 "--set", f"broker.id={broker_id}", "--set", f"zookeeper.connect={zookeeper.connect}",
                 "--set", f"offsets.topic.replication.factor={min(3, count)}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            log.close()
        bootstrap = ",".join(f"127.0.0.1:{first_port + i}" for i in range(count))
        console.print(f"ZooKeeper on {zookeeper.connect}; brokers 1..{count} on [bold]{bootstrap}[/bold]")
        console.print(f"logs and data under {directory}/; try: tidemark cluster status --bootstrap-server "
                      f"127.0.0.1:{first_port}")
        console.print("Ctrl-C stops them all.")
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        try:
            while not stopped.wait(0.5):
                for broker_id, process in enumerate(brokers, start=1):
                    if process.poll() is not None:
                        console.print(f"broker {broker_id} exited ({process.returncode}): see "
                                      f"{directory}/broker-{broker_id}.log")
                        stopped.set()
        except KeyboardInterrupt:
            pass
    finally:
        # One at a time: each controlled shutdown hands its leaderships to brokers still up.
        for process in reversed(brokers):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        zookeeper.stop()
        console.print("stopped")


@cluster.command("status")
@click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT[,...]")
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for the cluster.")
def status(bootstrap: str, timeout: float) -> None:
    """Brokers, the controller, and each partition's leader, ISR and offline replicas."""
    console = Console()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        metadata = admin.list_topics(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - one line naming the cause
        raise click.ClickException(f"cannot reach {bootstrap}: {exc}") from None
    console.print(f"cluster {metadata.cluster_id}: controller {metadata.controller_id}; brokers "
                  + ", ".join(f"{b.id}@{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id)))
    table = Table("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "STATUS")
    under = 0
    for name in sorted(metadata.topics):
        for index, partition in sorted(metadata.topics[name].partitions.items()):
            offline = [r for r in partition.replicas if r not in metadata.brokers]
            state = "offline" if partition.leader < 0 else (
                "under-replicated" if len(partition.isrs) < len(partition.replicas) else "ok")
            under += state != "ok"
            table.add_row(name, str(index), str(partition.leader), ",".join(map(str, partition.replicas)),
                          ",".join(map(str, partition.isrs)), ",".join(map(str, offline)), state)
    console.print(table)
    console.print(f"{under} partition(s) under-replicated or offline")
