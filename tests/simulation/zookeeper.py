"""ZooKeeper as the simulation sees it: one linearizable store of znodes with versions, ephemeral
znodes owned by sessions, and sessions that expire when their broker is not heard from for the
session timeout. Who may reach it, and when, is the network's business (cluster.py).

`KazooLike` gives tidemark's own ZooKeeper code (cluster/zk/isr.py's alter_isr) the three kazoo
calls it makes, so a leader's ISR write is the real compare-and-set, on the state znode's bytes
as zk_data encodes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from tidemark.cluster.zk import zk_data


@dataclasses.dataclass(slots=True)
class Stat:
    version: int
    czxid: int
    ephemeralOwner: int  # noqa: N815 - kazoo's name
    mzxid: int = 0


@dataclasses.dataclass(slots=True)
class Znode:
    data: bytes
    stat: Stat


class SimZooKeeper:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.nodes: dict[str, Znode] = {}
        self._zxid = 0
        self._next_session = 1
        self.sessions: dict[int, int] = {}  # live session -> last time heard from (ms)
        self.on_change: Callable[[str], None] = lambda path: None  # watches: told of every change

    # -- sessions -------------------------------------------------------------------------------

    def open_session(self, now_ms: int) -> int:
        session = self._next_session
        self._next_session += 1
        self.sessions[session] = now_ms
        return session

    def heard(self, session: int, now_ms: int) -> bool:
        """A ping: False when that session has expired (its owner must open a new one)."""
        if session not in self.sessions:
            return False
        self.sessions[session] = now_ms
        return True

    def expire(self, now_ms: int) -> list[int]:
        """End the sessions not heard from for the session timeout (their ephemerals go)."""
        gone = [s for s, heard in self.sessions.items() if now_ms - heard > self.session_timeout_ms]
        for session in gone:
            self.close_session(session)
        return gone

    def close_session(self, session: int) -> None:
        self.sessions.pop(session, None)
        for path in [p for p, node in self.nodes.items() if node.stat.ephemeralOwner == session]:
            del self.nodes[path]
            self.on_change(path)

    # -- znodes ---------------------------------------------------------------------------------

    def get(self, path: str) -> tuple[bytes, Stat]:
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, dataclasses.replace(node.stat)

    def exists(self, path: str) -> Stat | None:
        node = self.nodes.get(path)
        return dataclasses.replace(node.stat) if node is not None else None

    def create(self, path: str, data: bytes, session: int = 0) -> Stat:
        if path in self.nodes:
            raise NodeExistsError(path)
        if session and session not in self.sessions:
            raise NoNodeError("session expired")  # never reached: callers check their session
        self._zxid += 1
        node = Znode(data, Stat(0, self._zxid, session, self._zxid))
        self.nodes[path] = node
        self.on_change(path)
        return dataclasses.replace(node.stat)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and version != node.stat.version:
            raise BadVersionError(path)
        node.data = data
        node.stat.version += 1
        self._zxid += 1
        node.stat.mzxid = self._zxid
        self.on_change(path)
        return dataclasses.replace(node.stat)

    def delete(self, path: str) -> None:
        if self.nodes.pop(path, None) is not None:
            self.on_change(path)

    def children(self, parent: str) -> list[str]:
        prefix = parent.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    # -- the partition state --------------------------------------------------------------------

    def partition_state(self, topic: str, partition: int) -> zk_data.PartitionState | None:
        try:
            data, stat = self.get(zk_data.partition_state_path(topic, partition))
        except NoNodeError:
            return None
        return zk_data.decode_partition_state(data, stat.version, stat.mzxid)


class KazooLike:
    """The part of KazooClient that isr.alter_isr calls, on the simulated store (instantaneous:
    the caller has already paid the network's round trip)."""

    def __init__(self, zk: SimZooKeeper) -> None:
        self._zk = zk

    def get(self, path: str) -> tuple[bytes, Stat]:
        return self._zk.get(path)

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        return self._zk.set(path, data, version)

    def create(self, path: str, data: bytes = b"", sequence: bool = False, makepath: bool = False,
               **_: Any) -> str:
        if sequence:  # ISR change notices: the simulated controller needs none (brokers watch states)
            return path
        self._zk.create(path, data)
        return path
