"""ZookeeperConsumer processes (`python -m tidemark.consumer`) and one journal of their events.

Each process prints JSON lines; a reader thread per process appends them to the shared Journal,
whose wait_for() wakes on every new event (bounded by its deadline, never a sleep).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WAIT_S = 120.0  # the bound of every wait: a failure, not a margin


class Journal:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def append(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def wait_for(self, condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not condition():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"not reached within {timeout_s}s: {what}; last events: {self.events[-8:]}")
                self._cond.wait(remaining)

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["event"] == kind]


class ConsumerProcess:
    def __init__(self, journal: Journal, zookeeper: str, bootstrap: str, group: str, topic: str,
                 config: dict[str, str], log_dir: Path) -> None:
        self.journal = journal
        self.args = [sys.executable, "-m", "tidemark.consumer", "--zookeeper", zookeeper,
                     "--bootstrap-server", bootstrap, "--group", group, "--topic", topic,
                     "--max-runtime-s", "400", *[a for k, v in config.items() for a in ("--config", f"{k}={v}")]]
        self.log_dir = log_dir
        self.process: subprocess.Popen[str] | None = None
        self.consumer_id: str | None = None
        self._registered = threading.Event()

    def start(self) -> ConsumerProcess:
        stderr = open(self.log_dir / f"consumer-{time.monotonic_ns()}.err", "w")
        self.process = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1"})
        stderr.close()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._registered.wait(WAIT_S):
            raise AssertionError("consumer did not register")
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            if event["event"] == "registered":
                self.consumer_id = event["consumer_id"]
                self._registered.set()
            event.setdefault("consumer_id", self.consumer_id)
            self.journal.append(event)

    def terminate(self) -> None:
        """SIGTERM: the consumer commits, releases its partitions and deregisters."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=WAIT_S) == 0

    def kill(self) -> None:
        """SIGKILL: nothing is released; ZooKeeper expires the session."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT_S)


def latest_assignments(journal: Journal, live: list[ConsumerProcess]) -> dict[str, dict[str, Any]]:
    """The last "assigned" event of each live consumer."""
    latest: dict[str, dict[str, Any]] = {}
    for event in journal.of("assigned"):
        latest[event["consumer_id"]] = event
    return {c.consumer_id: latest[c.consumer_id] for c in live if c.consumer_id in latest}


def balanced(journal: Journal, live: list[ConsumerProcess], partitions: list[str]) -> bool:
    """Every live consumer's last assignment was computed from exactly the live consumers, and
    together they own every partition once."""
    ids = sorted(c.consumer_id for c in live)
    latest = latest_assignments(journal, live)
    if len(latest) != len(live) or any(e["members"] != ids for e in latest.values()):
        return False
    owned = [p for e in latest.values() for p in e["partitions"]]
    return sorted(owned) == sorted(partitions)
