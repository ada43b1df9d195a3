"""`tidemark cluster`: ports checked first, a broker stopped, killed and restarted while the
cluster runs on, and `status` in plain columns, filtered, or as JSON."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import free_port
from tidemark.cli import cluster as cluster_cli
from tidemark.cli.main import main
from tidemark.zk.local_server import zookeeper_available

HANG_GUARD_S = 120.0
needs_zookeeper = pytest.mark.skipif(not zookeeper_available(), reason="ZooKeeper is not installed")


def tidemark(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemark.cli", *args], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, **kwargs)


@needs_zookeeper
def test_a_port_in_use_is_one_line_and_a_failure_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        second = taken.getsockname()[1]
        result = tidemark("cluster", "run", "--brokers", "2", "--first-port", str(second - 1),
                          "--zookeeper-port", str(free_port()), "--dir", str(tmp_path / "c"))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"Error: cannot listen on 127.0.0.1:{second} (broker 2, --first-port {second - 1}): Address already in use "
        f"(is another broker already running there?)"]
    assert not (tmp_path / "c" / "zookeeper").exists()


class RunningCluster:
    def __init__(self, directory: Path, brokers: int) -> None:
        self.directory = directory
        self.first_port = free_port()
        command = [sys.executable, "-m", "tidemark.cli", "cluster", "run", "--brokers", str(brokers), "--first-port",
                   str(self.first_port), "--zookeeper-port", str(free_port()), "--dir", str(directory)]
        # Started as a script's background job is (SIGINT ignored, which exec keeps): Ctrl-C and
        # `kill -INT` must stop it all the same.
        self.process = subprocess.Popen(["sh", "-c", "trap '' INT; exec \"$@\"", "sh", *command],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_line(self, text: str) -> str:
        deadline = time.monotonic() + HANG_GUARD_S
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            if text in line:
                return line

    def control(self, *args: str) -> subprocess.CompletedProcess[str]:
        return tidemark("cluster", *args, "--dir", str(self.directory))

    def status(self, *args: str) -> subprocess.CompletedProcess[str]:
        return tidemark("cluster", "status", "--bootstrap-server", f"127.0.0.1:{self.first_port}", *args)


def wait_until(check, what: str):
    deadline = time.monotonic() + HANG_GUARD_S
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not within {HANG_GUARD_S}s"
        time.sleep(0.2)


@needs_zookeeper
def test_one_broker_killed_stopped_and_restarted_while_the_cluster_runs_on(tmp_path: Path) -> None:
    cluster = RunningCluster(tmp_path / "c", brokers=2)
    try:
        cluster.wait_line("brokers 1..2 on")
        first = f"127.0.0.1:{cluster.first_port}"

        def brokers_up(count: int):
            result = cluster.status("--output", "json")
            return result.returncode == 0 and len(json.loads(result.stdout)["brokers"]) == count

        wait_until(lambda: brokers_up(2), "both brokers registered")
        admin = AdminClient({"bootstrap.servers": first})
        admin.create_topics([NewTopic("clicks", 2, 2)])["clicks"].result(timeout=60)

        killed = cluster.control("kill", "--broker", "2")
        assert killed.returncode == 0, killed.stderr
        assert killed.stdout.strip() == "broker 2 killed"
        line = cluster.wait_line("broker 2 exited")
        assert "signal 9" in line and "keep running" in line
        assert cluster.process.poll() is None
        assert cluster.control("kill", "--broker", "2").returncode == 1  # not running: said so

        restarted = cluster.control("restart", "--broker", "2")
        assert restarted.returncode == 0, restarted.stderr
        cluster.wait_line("broker 2 started again")
        wait_until(lambda: brokers_up(2), "broker 2 back")

        stopped = cluster.control("stop", "--broker", "2")
        assert stopped.returncode == 0, stopped.stderr
        assert "(exit code 0;" in cluster.wait_line("broker 2 exited")  # a clean, controlled shutdown
        wait_until(lambda: brokers_up(1), "broker 2 gone from the cluster")
        # Its leaderships moved to broker 1 and the ISRs shrank: under-replicated, none unavailable.
        under = wait_until(lambda: json.loads(cluster.status("--topic", "clicks", "--under-replicated",
                                                             "--output", "json").stdout)["partitions"],
                           "under-replicated partitions")
        assert {p["partition"] for p in under} <= {0, 1}
        assert all(p["leader"] == 1 and p["status"] == "under-replicated" for p in under)
        assert json.loads(cluster.status("--unavailable", "--output", "json").stdout)["partitions"] == []
        assert cluster.process.poll() is None
    finally:
        if cluster.process.poll() is None:
            cluster.process.send_signal(signal.SIGINT)
        try:
            code = cluster.process.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            cluster.process.terminate()  # SIGTERM stops the brokers and ZooKeeper too: nothing outlives the test
            cluster.process.wait(timeout=HANG_GUARD_S)
            raise
        assert code == 0
    assert list(cluster.directory.glob("*.pid")) == []


def test_status_of_a_port_nobody_listens_on_is_one_line(tmp_path: Path) -> None:
    result = tidemark("cluster", "status", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("Error: cannot reach 127.0.0.1:")


def test_status_piped_prints_plain_columns_never_cut(make_broker) -> None:
    broker = make_broker().start()
    long_name = "a-topic-name-long-enough-to-push-a-row-past-eighty-columns-" + "x" * 40
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(long_name, 1, 1)])[long_name].result(timeout=60)
    result = tidemark("cluster", "status", "--bootstrap-server", broker.bootstrap, "--topic", long_name,
                      env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "STATUS"]
    assert lines[2].split() == [long_name, "0", "0", "0", "0", "-", "ok"]  # the single node is broker 0
    assert lines[3] == "0 partition(s) under-replicated or unavailable"
    assert "│" not in result.stdout and "┃" not in result.stdout


def test_status_filters() -> None:
    states = [cluster_cli.PartitionState("a", 0, 1, [1, 2], [1, 2], []),
              cluster_cli.PartitionState("a", 1, 1, [1, 2], [1], [2]),
              cluster_cli.PartitionState("b", 0, -1, [2], [2], [2])]
    assert [s.status for s in states] == ["ok", "under-replicated", "unavailable"]
    pick = cluster_cli.select_partitions
    assert pick(states, ("a",), False, False) == states[:2]
    assert pick(states, (), True, False) == [states[1]]
    assert pick(states, (), False, True) == [states[2]]
    assert pick(states, (), True, True) == states[1:]


def test_control_commands_without_a_running_cluster_say_so(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["cluster", "stop", "--broker", "1", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "broker 1 is not running" in result.output
