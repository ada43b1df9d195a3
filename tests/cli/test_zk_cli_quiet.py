"""`tidemark zk migrate-offsets`: a ZooKeeper nobody listens on is one line at once, without
kazoo's own log lines about each failed connect."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import free_port

HANG_GUARD_S = 120


def tidemark(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemark.cli", *args], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_a_zookeeper_nobody_listens_on_is_one_line(make_broker) -> None:
    broker = make_broker().start()
    address = f"127.0.0.1:{free_port()}"
    result = tidemark("zk", "migrate-offsets", "--zookeeper", address, "--bootstrap-server", broker.bootstrap)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"Error: cannot read ZooKeeper {address}: cannot connect to {address}: Connection refused"]
