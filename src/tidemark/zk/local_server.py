"""A real ZooKeeper server (Debian's zookeeper package) in a child process: `make cluster`'s, and
the tests' and benches'.

Standalone mode, its own data dir and zoo.cfg, listening on 127.0.0.1 on a port chosen at run
time. `start()` returns once the server answers `srvr` (whitelisted in the config), `stop()`
ends only the process it started. `pause()`/`resume()` SIGSTOP/SIGCONT it: a server that
accepts nothing and answers nothing, as a hung or partitioned one looks to its clients.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


ZOOKEEPER_JAR = Path(os.environ.get("ZOOKEEPER_JAR", "/usr/share/java/zookeeper.jar"))
# The jar's manifest names its dependencies; one SLF4J binding keeps the log quiet and complete.
SLF4J_BINDING = ZOOKEEPER_JAR.parent / "slf4j-simple.jar"
STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def zookeeper_available() -> bool:
    return ZOOKEEPER_JAR.exists() and shutil.which("java") is not None


def wait_stopped(pid: int, timeout_s: float = 30.0) -> None:
    """Wait until every thread of process `pid` is stopped (state T in /proc), as a SIGSTOP
    leaves it: the signal stops the threads one by one as each is next scheduled."""
    deadline = time.monotonic() + timeout_s
    while True:
        running = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue  # the thread ended
            state = stat[stat.rindex(")") + 2]
            if state not in "TtZX":
                running.append(task.name)
        if not running:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} still has running threads {running} {timeout_s}s after SIGSTOP")
        time.sleep(0.001)


class ZooKeeperServer:
    def __init__(self, directory: Path, port: int | None = None, force_sync: bool = False) -> None:
        """force_sync: fsync each transaction's log entry (ZooKeeper's default, what a benchmark
        measures); tests run without it."""
        self.directory = directory
        self.force_sync = force_sync
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = directory / "zookeeper.log"

    @property
    def connect(self) -> str:
        """The zookeeper.connect string of this server."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> ZooKeeperServer:
        data_dir = self.directory / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        config = self.directory / "zoo.cfg"
        config.write_text(
            "tickTime=500\n"  # session timeouts may go down to 2 ticks: 1 s
            "maxSessionTimeout=120000\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=srvr,ruok\n"
            "maxClientCnxns=0\n"
            f"forceSync={'yes' if self.force_sync else 'no'}\n"
        )
        classpath = [str(ZOOKEEPER_JAR)] + ([str(SLF4J_BINDING)] if SLF4J_BINDING.exists() else [])
        log_file = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", ":".join(classpath),
             "org.apache.zookeeper.server.ZooKeeperServerMain", str(config)],
            stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        log_file.close()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"zookeeper exited with {self.process.returncode}:\n{self.log_path.read_text()}")
            if self.four_letter_word("srvr").startswith("Zookeeper version"):
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"zookeeper did not answer within {STARTUP_TIMEOUT_S}s:\n{self.log_path.read_text()}")

    def four_letter_word(self, word: str) -> str:
        """The server's answer to a four-letter word, "" when it does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(word.encode())
                chunks = []
                while chunk := sock.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return ""

    def pause(self) -> None:
        """SIGSTOP the server and return once every one of its threads has stopped: kill()
        returns before that, and until then a running thread still answers requests."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        wait_stopped(self.process.pid)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
