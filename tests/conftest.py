"""Shared fixtures: real tidemark broker processes on loopback, on ports chosen at run time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import hypothesis
import pytest

# A hang guard, not a margin: the wait ends as the broker listens. A broker restarted under a
# load average of 15 spent more than 30 s in its imports and start-up, so the guard is generous.
STARTUP_TIMEOUT_S = 120.0

# No property test may fail because the machine is busy: Hypothesis' per-example deadline
# (200 ms by default) and its too-slow health check are timing margins, so both are off for the
# whole suite; a test's own @settings still sets its examples and other checks.
hypothesis.settings.register_profile(
    "tidemark", deadline=None, suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("tidemark")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class BrokerProcess:
    """`tidemark serve` in a child process, so tests can SIGKILL and restart it like a real one."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None, port: int | None = None,
                 extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.env = env or {}  # added to the environment (e.g. tidemark.hold's TIDEMARK_HOLD_AT)
        self.settings = settings or {}
        self.extra_args = extra_args
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self._log_offset = 0
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> BrokerProcess:
        args = [sys.executable, "-m", "tidemark.cli", "serve", "--listen", self.bootstrap,
                "--data-dir", str(self.data_dir), "--log-format", "json"]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        args += list(self.extra_args)
        log_file = open(self.log_path, "ab")
        self._log_offset = log_file.tell()  # where this run's lines start (restarts share the file)
        self.process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                        env={**os.environ, **self.env})
        log_file.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self._this_runs_log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {STARTUP_TIMEOUT_S}s:\n{self._this_runs_log()}")

    def _this_runs_log(self) -> str:
        """What this start of the broker logged (restarts append to one file)."""
        return self.log_path.read_bytes()[self._log_offset:].decode(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: a clean shutdown."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: the crash a power cut looks like to the process."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)  # a paused process dies as well
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: a process that is alive but answers nothing (a GC pause, a hung host)."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def log_text(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def wait_for_log(self, text: str, count: int = 1, timeout_s: float = 120.0) -> None:
        """Wait until `text` appears `count` times in this run's log lines (the timeout is a
        bound that ends a test that would otherwise hang, not a margin)."""
        deadline = time.monotonic() + timeout_s
        while self.log_path.read_bytes()[self._log_offset:].count(text.encode()) < count:
            if self.process is not None and self.process.poll() is not None:
                raise AssertionError(f"broker exited before logging {text!r}:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged {count} time(s) within {timeout_s}s")
            time.sleep(0.01)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module (a fresh data dir), shut down cleanly at the end."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data").start()
    yield process
    try:
        process.stop()
    finally:
        process.kill()


# Consumer-group tests: rebalances without the 3 s initial delay, a smaller offsets topic.
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "200", "offsets.topic.num.partitions": "10"}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per test module, set up for fast consumer-group tests."""
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "data", GROUP_SETTINGS).start()
    yield process
    process.kill()


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator:
    """A factory for brokers a test controls itself (restarts, crashes, custom settings)."""
    started: list[BrokerProcess] = []

    def make(settings: dict[str, str] | None = None, data_dir: Path | None = None, port: int | None = None,
             extra_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> BrokerProcess:
        process = BrokerProcess(data_dir or tmp_path / f"data{len(started)}", settings, port, extra_args, env)
        started.append(process)
        return process

    yield make
    for process in started:
        process.kill()
