"""Helpers for the stop-signal tests: a broker process launched without waiting for it to listen
(its start may be held), and the bound a stop signal promises."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.conftest import BrokerProcess

CONTROLLED_SHUTDOWN_TIMEOUT_MS = 5000
# The spec: a stop signal ends the process within controlled.shutdown.timeout.ms + 5 s.
STOP_BOUND_S = CONTROLLED_SHUTDOWN_TIMEOUT_MS / 1000 + 5
HANG_GUARD_S = 60.0  # ends a test whose broker never exits (the assertion says by how much)


def launch(broker: BrokerProcess) -> BrokerProcess:
    """Start `tidemark serve` as BrokerProcess.start does, without waiting for it to listen."""
    import os

    args = [sys.executable, "-m", "tidemark.cli", "serve", "--listen", broker.bootstrap,
            "--data-dir", str(broker.data_dir), "--log-format", "json"]
    for key, value in broker.settings.items():
        args += ["--set", f"{key}={value}"]
    log_file = open(broker.log_path, "ab")
    broker._log_offset = log_file.tell()
    broker.process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT,
                                      env={**os.environ, **broker.env})
    log_file.close()
    return broker


def sigterm_and_time_exit(broker: BrokerProcess) -> tuple[float, int | None]:
    """SIGTERM the broker; (seconds until it exited, its exit code), or (the guard, None) if it
    was still alive then (it is killed)."""
    assert broker.process is not None
    started = time.monotonic()
    broker.process.send_signal(signal.SIGTERM)
    try:
        code = broker.process.wait(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        broker.kill()
        return HANG_GUARD_S, None
    return time.monotonic() - started, code
