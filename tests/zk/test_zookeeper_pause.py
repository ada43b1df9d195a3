"""A paused ZooKeeper answers nothing from the moment pause() returns: SIGSTOP stops a process's
threads one by one as each is next scheduled, so kill() returning is not enough (on a busy
machine a thread still running answered a commit the test believed could not be answered)."""

from __future__ import annotations

from pathlib import Path

from tidemark.zk.local_server import ZooKeeperServer


def _thread_states(pid: int) -> list[str]:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        states.append(stat[stat.rindex(")") + 2])
    return states


def test_every_thread_is_stopped_when_pause_returns(zookeeper: ZooKeeperServer) -> None:
    for _ in range(20):
        zookeeper.pause()
        try:
            assert set(_thread_states(zookeeper.process.pid)) <= set("TtZX")
        finally:
            zookeeper.resume()
    assert zookeeper.four_letter_word("ruok") == "imok"
