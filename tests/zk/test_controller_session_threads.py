"""The controller runs on the broker's one ZooKeeper session: its events one at a time, in order,
on the session's threads (no thread of its own), and each ZooKeeper call they make bounded by
the session's call timeout, so a stalled ZooKeeper fails a call instead of parking it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.zk.cluster_nodes import WAIT_S, Node, Observer
from tidemark.cluster.zk import topic_admin
from tidemark.cluster.zk.session import BoundedCalls, SerialEvents, ZkCallTimeoutError, ZkSession, connect


def test_controller_events_run_on_the_session_threads(cluster: dict[int, Node], observer: Observer) -> None:
    topic_admin.create_topic(observer.client, "orders", 3, 3)
    observer.wait(lambda s: all((("orders", p) in s.partitions and s.partitions["orders", p].state is not None)
                                for p in range(3)), "the controller created the partitions' states")
    names = [thread.name for thread in threading.enumerate()]
    assert not [name for name in names if name.startswith("controller")], names
    controller = next(node.controller for node in cluster.values() if node.controller.is_active)
    ran_on = controller._events.submit(lambda: threading.current_thread().name)
    assert ran_on.result(WAIT_S).startswith("zookeeper")


def test_serial_events_run_one_at_a_time_in_order_on_a_shared_pool() -> None:
    pool = ThreadPoolExecutor(4)
    events = SerialEvents(pool.submit)
    running, most, ran = [0], [0], []
    lock = threading.Lock()

    def event(i: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        ran.append(i)
        with lock:
            running[0] -= 1
        return i

    futures = [events.submit(event, i) for i in range(200)]
    assert [f.result(WAIT_S) for f in futures] == list(range(200))
    assert ran == list(range(200)) and most[0] == 1
    events.shutdown()
    with pytest.raises(RuntimeError):
        events.submit(event, 200)
    pool.shutdown()


def test_a_call_to_a_stalled_zookeeper_times_out(zookeeper, chroot: str) -> None:
    client = connect(chroot, session_timeout_ms=20_000)  # kazoo would wait 2/3 of it for the server
    calls = BoundedCalls(client, timeout_s=1.0)
    try:
        assert calls.exists("/") is not None
        zookeeper.pause()
        try:
            with pytest.raises(ZkCallTimeoutError):
                calls.get_children("/")
        finally:
            zookeeper.resume()
    finally:
        client.stop()
        client.close()


def test_a_session_call_past_its_timeout_fails_as_a_zookeeper_call(zookeeper, chroot: str) -> None:
    """What the broker's ZooKeeper tasks catch (KazooException): a bare TimeoutError here once
    ended the ISR maintenance task, and the broker halted, after a SIGSTOP outlived the session."""
    async def scenario() -> None:
        session = ZkSession(chroot)
        await session.start()
        release = threading.Event()
        try:
            with pytest.raises(ZkCallTimeoutError):  # the call cannot end before the release below
                await session.call(release.wait, WAIT_S, timeout_s=0.1)
        finally:
            release.set()
            await session.close()

    asyncio.run(asyncio.wait_for(scenario(), timeout=WAIT_S))
