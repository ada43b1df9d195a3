"""`tidemark cluster`: a ZooKeeper cluster of tidemark brokers to try, its status, and one broker
stopped, killed or restarted to watch failover.

    tidemark cluster run [--brokers 3] [--first-port 9092] [--zookeeper-port 2181] [--dir tidemark-cluster]
    tidemark cluster status --bootstrap-server HOST:PORT [--topic T]... [--under-replicated | --unavailable]
        [--output table|json]
    tidemark cluster stop|kill|restart --broker N [--dir tidemark-cluster]

`run` checks its ports, starts ZooKeeper (Debian's zookeeper jar) and the brokers on 127.0.0.1,
each a `tidemark serve` process with broker.id 1..N and its data under --dir, prints how to reach
them and stops them all (SIGTERM: controlled shutdowns, one at a time) on Ctrl-C. A broker that
exits is reported and the others keep running. `stop` (SIGTERM: a controlled shutdown) and `kill`
(SIGKILL: a crash) signal one broker through the pid file `run` keeps; `restart` asks `run` to
start it again (stopping it first if it runs). `status` asks any broker for the cluster's
brokers, controller and every partition's leader, ISR and offline replicas over the Kafka
protocol, and flags under-replicated and unavailable partitions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import click

from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available

POLL_S = 0.5
STOP_TIMEOUT_S = 60.0
REQUEST_TIMEOUT_S = 120.0


def _pid_file(directory: Path, broker_id: int) -> Path:
    return directory / f"broker-{broker_id}.pid"


def _restart_request(directory: Path, broker_id: int) -> Path:
    return directory / f"broker-{broker_id}.restart"


class _Brokers:
    """The broker processes `run` owns, each with a pid file the control commands read."""

    def __init__(self, directory: Path, count: int, first_port: int, zookeeper_connect: str) -> None:
        self.directory = directory
        self.count = count
        self.first_port = first_port
        self.zookeeper_connect = zookeeper_connect
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, broker_id: int) -> None:
        log = open(self.directory / f"broker-{broker_id}.log", "ab")
        # A session of its own: Ctrl-C in the terminal reaches `run` only, which then stops the
        # brokers one at a time (all at once, no controlled shutdown could hand leaderships over).
        process = subprocess.Popen(
            [sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{self.port(broker_id)}",
             "--data-dir", str(self.directory / f"broker-{broker_id}"), "--log-format", "json",
             "--set", f"broker.id={broker_id}", "--set", f"zookeeper.connect={self.zookeeper_connect}",
             "--set", f"offsets.topic.replication.factor={min(3, self.count)}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        self.processes[broker_id] = process
        _pid_file(self.directory, broker_id).write_text(f"{process.pid}\n")

    def port(self, broker_id: int) -> int:
        return self.first_port + broker_id - 1

    def running(self, broker_id: int) -> bool:
        process = self.processes.get(broker_id)
        return process is not None and process.poll() is None

    def reap(self) -> list[tuple[int, int]]:
        """(broker id, exit code) of each broker that exited since the last call."""
        exited = []
        for broker_id, process in list(self.processes.items()):
            if process.poll() is not None:
                del self.processes[broker_id]
                _pid_file(self.directory, broker_id).unlink(missing_ok=True)
                exited.append((broker_id, process.returncode))
        return exited

    def stop(self, broker_id: int) -> None:
        process = self.processes.get(broker_id)
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        self.reap()


def _check_ports(ports: list[tuple[int, str]]) -> None:
    from tidemark.cli.serve import _check_port_free

    for port, option in ports:
        _check_port_free("127.0.0.1", port, option)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cluster() -> None:
    """A ZooKeeper cluster of tidemark brokers: run one, show its state, stop or restart a broker."""


@cluster.command("run")
@click.option("--brokers", "count", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--first-port", default=9092, show_default=True, help="Broker N listens on first-port + N - 1.")
@click.option("--zookeeper-port", default=2181, show_default=True)
@click.option("--dir", "directory", default="tidemark-cluster", show_default=True, type=click.Path(path_type=Path))
def run(count: int, first_port: int, zookeeper_port: int, directory: Path) -> None:
    """Start ZooKeeper and COUNT brokers on 127.0.0.1; Ctrl-C stops them all."""
    if not zookeeper_available():
        raise click.ClickException("ZooKeeper is not installed (make system-deps installs zookeeperd)")
    # Every port before anything starts: one line and a non-zero exit, not a broker dying later.
    _check_ports([(zookeeper_port, "--zookeeper-port")]
                 + [(first_port + i, f"broker {i + 1}, --first-port {first_port}") for i in range(count)])
    directory.mkdir(parents=True, exist_ok=True)
    for stale in [*directory.glob("broker-*.pid"), *directory.glob("broker-*.restart")]:
        stale.unlink()
    zookeeper = ZooKeeperServer(directory / "zookeeper", port=zookeeper_port, force_sync=True).start()
    brokers = _Brokers(directory, count, first_port, zookeeper.connect)
    stopped = threading.Event()
    # Both by hand: a process started in the background of a script inherits SIGINT ignored,
    # and Python then raises no KeyboardInterrupt for it, so Ctrl-C or `kill -INT` would do nothing.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    try:
        for broker_id in range(1, count + 1):
            brokers.start(broker_id)
        bootstrap = ",".join(f"127.0.0.1:{brokers.port(i)}" for i in range(1, count + 1))
        click.echo(f"ZooKeeper on {zookeeper.connect}; brokers 1..{count} on {bootstrap}")
        click.echo(f"logs and data under {directory}/; try: tidemark cluster status --bootstrap-server "
                   f"127.0.0.1:{first_port}")
        click.echo(f"tidemark cluster stop|kill|restart --broker N --dir {directory} stops, kills or restarts "
                   f"one broker; Ctrl-C stops them all.", nl=True)
        while not stopped.wait(POLL_S):
            _watch(brokers, directory)
    finally:
        # One at a time: each controlled shutdown hands its leaderships to brokers still up.
        for broker_id in sorted(brokers.processes, reverse=True):
            brokers.stop(broker_id)
        zookeeper.stop()
        click.echo("stopped")


def _watch(brokers: _Brokers, directory: Path) -> None:
    """Say which brokers exited (the others keep running) and act on restart requests."""
    for broker_id, code in brokers.reap():
        how = f"signal {-code}" if code < 0 else f"exit code {code}"
        click.echo(f"broker {broker_id} exited ({how}; log: {directory}/broker-{broker_id}.log); the other "
                   f"brokers keep running. tidemark cluster restart --broker {broker_id} --dir {directory} "
                   f"starts it again.")
    for broker_id in range(1, brokers.count + 1):
        request = _restart_request(directory, broker_id)
        if not request.exists():
            continue
        if brokers.running(broker_id):
            brokers.stop(broker_id)
            click.echo(f"broker {broker_id} stopped (controlled shutdown)")
        brokers.start(broker_id)
        request.unlink(missing_ok=True)
        click.echo(f"broker {broker_id} started again on 127.0.0.1:{brokers.port(broker_id)}")


def _broker_option(func):
    func = click.option("--dir", "directory", default="tidemark-cluster", show_default=True,
                        type=click.Path(path_type=Path), help="The --dir of `tidemark cluster run`.")(func)
    return click.option("--broker", "broker_id", required=True, type=click.IntRange(1, 9), metavar="N",
                        help="The broker.id.")(func)


def _running_pid(directory: Path, broker_id: int) -> int:
    pid_file = _pid_file(directory, broker_id)
    try:
        return int(pid_file.read_text())
    except (OSError, ValueError):
        raise click.ClickException(f"broker {broker_id} is not running under {directory}/ (no {pid_file.name}; "
                                   f"is `tidemark cluster run --dir {directory}` running?)") from None


def _wait_gone(path: Path, what: str) -> None:
    """`run` removes the pid file when it sees the broker exit, the request file once acted on."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while path.exists():
        if time.monotonic() > deadline:
            raise click.ClickException(f"{what}: no answer from `tidemark cluster run` in {REQUEST_TIMEOUT_S:.0f} s")
        time.sleep(POLL_S)


def _signal_broker(directory: Path, broker_id: int, sig: signal.Signals, what: str) -> None:
    pid = _running_pid(directory, broker_id)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise click.ClickException(f"broker {broker_id} (pid {pid}) is not running") from None
    _wait_gone(_pid_file(directory, broker_id), f"broker {broker_id}")
    click.echo(f"broker {broker_id} {what}")


@cluster.command("stop")
@_broker_option
def stop_command(broker_id: int, directory: Path) -> None:
    """Stop one broker with SIGTERM: a controlled shutdown (its leaderships move first)."""
    _signal_broker(directory, broker_id, signal.SIGTERM, "stopped (controlled shutdown)")


@cluster.command("kill")
@_broker_option
def kill_command(broker_id: int, directory: Path) -> None:
    """Kill one broker with SIGKILL: a crash (its leaderships move when its session expires)."""
    _signal_broker(directory, broker_id, signal.SIGKILL, "killed")


@cluster.command("restart")
@_broker_option
def restart_command(broker_id: int, directory: Path) -> None:
    """Start one broker again (after a controlled shutdown if it runs); ElectLeaders (preferred)
    then moves its leaderships back."""
    if not directory.is_dir():
        raise click.ClickException(f"no cluster under {directory}/ "
                                   f"(is `tidemark cluster run --dir {directory}` running?)")
    request = _restart_request(directory, broker_id)
    request.write_text("restart\n")
    _wait_gone(request, f"restart of broker {broker_id}")
    click.echo(f"broker {broker_id} started again")


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]

    @property
    def status(self) -> str:
        if self.leader < 0:
            return "unavailable"
        return "under-replicated" if len(self.isr) < len(self.replicas) else "ok"


def partition_states(metadata) -> list[PartitionState]:
    live = set(metadata.brokers)
    return [PartitionState(name, index, p.leader, list(p.replicas), list(p.isrs),
                           [r for r in p.replicas if r not in live])
            for name in sorted(metadata.topics)
            for index, p in sorted(metadata.topics[name].partitions.items())]


def select_partitions(states: list[PartitionState], topics: tuple[str, ...], under_replicated: bool,
                      unavailable: bool) -> list[PartitionState]:
    """The partitions of `topics` (all when empty); with either flag only those in that state (both: either)."""
    wanted = ({"under-replicated"} if under_replicated else set()) | ({"unavailable"} if unavailable else set())
    return [s for s in states if (not topics or s.topic in topics) and (not wanted or s.status in wanted)]


HEADERS = ("TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "STATUS")


@cluster.command("status")
@click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT[,...]")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC", help="Only this topic; repeatable.")
@click.option("--under-replicated", is_flag=True, help="Only partitions whose ISR is smaller than their replicas.")
@click.option("--unavailable", is_flag=True, help="Only partitions without a leader (with --under-replicated: both).")
@click.option("--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for the cluster.")
def status(bootstrap: str, topics: tuple[str, ...], under_replicated: bool, unavailable: bool, output: str,
           timeout: float) -> None:
    """Brokers, the controller, and each partition's leader, ISR and offline replicas."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from tidemark.client.reach import unreachable
    from tidemark.spark.clients import quiet

    why = unreachable(bootstrap, timeout)
    if why is not None:
        raise click.ClickException(f"cannot reach {bootstrap}: {why}")
    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise click.ClickException(f"cannot reach {bootstrap}: {exc.args[0].str()}") from None
    missing = sorted(set(topics) - set(metadata.topics))
    if missing:
        raise click.ClickException(f"no such topic: {', '.join(missing)}")
    states = select_partitions(partition_states(metadata), topics, under_replicated, unavailable)
    brokers = [{"id": b.id, "host": b.host, "port": b.port}
               for b in sorted(metadata.brokers.values(), key=lambda b: b.id)]
    if output == "json":
        click.echo(json.dumps({"cluster_id": metadata.cluster_id, "controller": metadata.controller_id,
                               "brokers": brokers,
                               "partitions": [{"topic": s.topic, "partition": s.partition, "leader": s.leader,
                                               "replicas": s.replicas, "isr": s.isr, "offline": s.offline,
                                               "status": s.status} for s in states]}))
        return
    click.echo(f"cluster {metadata.cluster_id}: controller {metadata.controller_id}; brokers "
               + ", ".join(f"{b['id']}@{b['host']}:{b['port']}" for b in brokers))
    rows = [(s.topic, s.partition, s.leader, _ids(s.replicas), _ids(s.isr), _ids(s.offline), s.status)
            for s in states]
    _print_rows(rows)
    click.echo(f"{sum(s.status != 'ok' for s in states)} partition(s) under-replicated or unavailable")


def _ids(ids: list[int]) -> str:
    return ",".join(map(str, ids)) or "-"


def _print_rows(rows: list[tuple]) -> None:
    """A boxed table on a terminal; plain columns otherwise (for grep and cut). Never cut short."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*HEADERS)
        for column in table.columns:
            column.overflow = "fold"
        for row in rows:
            table.add_row(*map(str, row))
        Console().print(table)
        return
    from tidemark.cli.output import format_table

    click.echo(format_table(HEADERS, rows))
