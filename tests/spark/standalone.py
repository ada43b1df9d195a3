"""A Spark standalone cluster from what the pyspark package ships: a Master and two Workers, each
its own JVM (started with bin/spark-class) on loopback and free ports, each Worker launching its
own executor JVM and Python workers. Started and stopped by process id, every wait bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyspark

from tests.conftest import free_port

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 180.0  # bounds the wait for the JVMs to come up on two shared cores
SUBMIT_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 30.0


def source_root() -> str:
    """The directory tidemark is imported from here (the worktree's src under PYTHONPATH=src)."""
    import tidemark

    return str(Path(tidemark.__file__).resolve().parents[1])


class StandaloneCluster:
    def __init__(self, root: Path, workers: int = 2, worker_memory: str = "1g",
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.workers = workers
        self.worker_memory = worker_memory
        self.master_port = free_port()
        self.ui_port = free_port()
        self.processes: list[subprocess.Popen] = []
        # The JVMs get no PYTHONPATH: what executors import is what each application ships or
        # names (spark.executorEnv.PYTHONPATH, --py-files), see submit().
        self.env = {
            **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")},
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            **(env or {}),
        }

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def worker_dir(self, index: int) -> Path:
        return self.root / f"worker{index}"

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")
        # Its own session: the JVM and what it launches (executors, Python workers) form one
        # process group, ended by this id at stop.
        process = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log,
                                   stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        log.close()
        self.processes.append(process)

    def start(self) -> StandaloneCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.master_port), "--webui-port", str(self.ui_port)])
            self._wait(lambda state: True, "the master's status page")
            for i in range(self.workers):
                self.worker_dir(i).mkdir(exist_ok=True)
                self._spawn(f"worker{i}", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                           "--port", str(free_port()), "--webui-port", str(free_port()),
                                           "--cores", "1", "--memory", self.worker_memory,
                                           "--work-dir", str(self.worker_dir(i)), self.url])
            self._wait(lambda state: state.get("aliveworkers") == self.workers, f"{self.workers} alive workers")
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as response:
            return json.loads(response.read())

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a cluster JVM exited with {process.returncode}: {self.logs()}")
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {START_TIMEOUT_S:.0f} s: {self.logs()}")
            time.sleep(0.2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.root.glob("*.log")))

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver run here: this tidemark importable (an absolute path)."""
        return {**self.env, "PYTHONPATH": source_root()}

    def executor_conf(self) -> dict[str, str]:
        """As if tidemark were installed on the workers: executors import it from the same place as
        the driver (an absolute path: executors run in their own work directories)."""
        return {"spark.executorEnv.PYTHONPATH": source_root(), "spark.pyspark.python": sys.executable}

    def submit(self, *args: str, conf: dict[str, str | None] | None = None, options: tuple[str, ...] = (),
               master: str | None = None) -> subprocess.CompletedProcess:
        """spark-submit to this cluster (or `master`; client mode: the driver runs here), bounded in time.
        `conf` adds to and overrides executor_conf() and the defaults (None removes a setting)."""
        settings: dict[str, str | None] = {
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.driver.python": sys.executable,
            **self.executor_conf(),
            **(conf or {}),
        }
        command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", master or self.url, *options]
        for key, value in settings.items():
            if value is not None:
                command += ["--conf", f"{key}={value}"]
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=SUBMIT_TIMEOUT_S,
                              env=self.driver_env())

    def executors_launched(self) -> list[int]:
        """How many executors each worker has launched (one directory per executor per app)."""
        return [sum(1 for app in self.worker_dir(i).glob("app-*") for _ in app.iterdir())
                for i in range(self.workers)]

    def stop(self) -> None:
        # Workers first (each ends its executors), the master last; SIGKILL for what is left.
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_TIMEOUT_S)
            try:
                os.killpg(process.pid, signal.SIGKILL)  # executors or Python workers it left behind
            except ProcessLookupError:
                pass
        self.processes.clear()
