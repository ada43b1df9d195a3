"""SIGTERM ends a ZooKeeper cluster's broker within controlled.shutdown.timeout.ms + 5 s even
when ZooKeeper does not answer: with ZooKeeper SIGSTOPped and kazoo calls parked in the
broker's threads, and during the start. The process never waits on a stuck thread."""

from __future__ import annotations

import os
import signal
import time

from tests.cli.stop_bound import CONTROLLED_SHUTDOWN_TIMEOUT_MS, STOP_BOUND_S, launch, sigterm_and_time_exit
from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic
from tests.integration.raw import RawClient
from tidemark.hold import HOLD_AT
from tidemark.log.manager import CLEAN_SHUTDOWN_FILE
from tidemark.wire.api_keys import ApiKey


def _settings(chroot: str) -> dict[str, str]:
    return {"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1",
            "controlled.shutdown.timeout.ms": str(CONTROLLED_SHUTDOWN_TIMEOUT_MS),
            "zookeeper.session.timeout.ms": "60000"}  # outlives the pause: nothing expires


def _parked_kazoo_calls(broker: BrokerProcess) -> int:
    """How many executor threads are inside a kazoo call, from a `kill -USR2` stack dump."""
    before = len(broker.log_path.read_bytes())
    os.kill(broker.process.pid, signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while b"File " not in broker.log_path.read_bytes()[before:]:
        assert time.monotonic() < deadline, "no stack dump"
        time.sleep(0.01)
    time.sleep(0.1)  # not a margin: a dump read half-written counts too few, and is asked again
    dump = broker.log_path.read_text(errors="replace")[before:]
    threads = dump.split("Thread 0x")
    return sum(1 for t in threads if "concurrent/futures/thread.py" in t and "kazoo" in t)


def test_sigterm_with_zookeeper_paused_and_calls_parked_exits_within_the_bound(zookeeper, chroot, tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "data", _settings(chroot)).start()
    try:
        create_topic(broker.bootstrap, "live", 1)
        with RawClient(broker.bootstrap) as raw:
            zookeeper.pause()
            try:
                for n in range(8):  # more than the default executor's threads on a small machine
                    raw.send_frame(raw.encode(ApiKey.CREATE_TOPICS, 7, {"topics": [{"name": f"parked-{n}", "num_partitions": 1,
                                                                  "replication_factor": 1, "assignments": [],
                                                                  "configs": []}],
                                                      "timeout": 60000, "validate_only": False}))
                deadline = time.monotonic() + 30
                while _parked_kazoo_calls(broker) == 0:
                    assert time.monotonic() < deadline, "no kazoo call parked"
                seconds, code = sigterm_and_time_exit(broker)
            finally:
                zookeeper.resume()
    finally:
        broker.kill()
    print(f"exited {seconds:.2f}s after SIGTERM with {code}")
    assert code == 0 and seconds <= STOP_BOUND_S, (seconds, code, broker.log_text()[-3000:])
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()


def test_sigterm_during_the_start_with_zookeeper_paused_exits_within_the_bound(zookeeper, chroot, tmp_path) -> None:
    held = launch(BrokerProcess(tmp_path / "data", _settings(chroot), env={HOLD_AT: "broker_start"}))
    try:
        held.wait_for_log('"point": "broker_start"')  # registered in the cluster's session, logs open
        zookeeper.pause()
        try:
            seconds, code = sigterm_and_time_exit(held)
        finally:
            zookeeper.resume()
    finally:
        held.kill()
    print(f"exited {seconds:.2f}s after SIGTERM with {code}")
    assert code == 0 and seconds <= STOP_BOUND_S, (seconds, code, held.log_text()[-3000:])
    assert "broker_start_cancelled" in held.log_text()
    assert (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).exists()
