"""The broker's one ZooKeeper session (Kafka's zookeeper.connect, zookeeper.session.timeout.ms)."""

from __future__ import annotations

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

DEFAULT_SESSION_TIMEOUT_MS = 18000  # Kafka's zookeeper.session.timeout.ms


def connect(zookeeper_connect: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
            timeout_s: float = 30.0) -> KazooClient:
    """A started client (blocking until connected or timeout_s). It reconnects forever in the
    background and opens a new session by itself after an expiry."""
    client = KazooClient(hosts=zookeeper_connect, timeout=session_timeout_ms / 1000,
                         connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))
    client.start(timeout=timeout_s)
    return client
