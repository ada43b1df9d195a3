"""`tidemark serve` refuses a port in use with one line on stderr, before opening any log."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import BrokerProcess

RUN_TIMEOUT_S = 60


@pytest.fixture
def taken_port():
    """A port bound and listening on loopback for the test's duration (as a running broker holds it)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--data-dir", str(data_dir), *args],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)


def test_listen_port_in_use(tmp_path: Path, taken_port: int) -> None:
    result = serve(tmp_path / "data", "--listen", f"127.0.0.1:{taken_port}")
    assert result.returncode == 1
    assert result.stderr == (f"Error: cannot listen on 127.0.0.1:{taken_port} (--listen): Address already in use "
                             f"(is another broker already running there?)\n")
    assert not (tmp_path / "data").exists()


def test_second_broker_on_the_same_port(tmp_path: Path) -> None:
    """`make serve` twice: the second one says so in one line and leaves the first alone."""
    first = BrokerProcess(tmp_path / "first").start()
    try:
        result = serve(tmp_path / "second", "--listen", first.bootstrap)
        assert result.returncode == 1
        assert result.stderr.splitlines() == [f"Error: cannot listen on {first.bootstrap} (--listen): Address "
                                              f"already in use (is another broker already running there?)"]
        assert first.process is not None and first.process.poll() is None
    finally:
        assert first.stop() == 0


def test_metrics_port_in_use(tmp_path: Path, taken_port: int) -> None:
    result = serve(tmp_path / "data", "--listen", "127.0.0.1:0", "--metrics-port", str(taken_port))
    assert result.returncode == 1
    assert result.stderr == (f"Error: cannot listen on 127.0.0.1:{taken_port} (--metrics-port): Address already "
                             f"in use (is another broker already running there?)\n")
