"""The tests' fault-injecting proxy (tests/fault_proxy.py): who a connection comes from, and what
each fault does to the bytes of one direction, on a loopback echo server."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tests.fault_proxy import BLACKHOLE, CLIENTS, DROP, REQUESTS, RESPONSES, Delay, FaultProxy, source_of_first_request
from tidemark.wire.api_keys import ApiKey

WAIT_S = 30.0


def _frame(client_id: str, body: bytes = b"payload") -> bytes:
    name = client_id.encode()
    payload = struct.pack(">hhih", ApiKey.FETCH, 12, 7, len(name)) + name + body
    return struct.pack(">i", len(payload)) + payload


class Echo:
    """A loopback server that sends every byte back and counts what it received."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = 0
        self.got = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                with self.got:
                    self.received += len(data)
                    self.got.notify_all()
                conn.sendall(data)


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


@pytest.fixture
def proxy():
    p = FaultProxy()
    yield p
    p.close()


def test_the_source_is_the_follower_a_fetcher_s_client_id_names():
    assert source_of_first_request(_frame("replica-3")[4:]) == 3
    assert source_of_first_request(_frame("rdkafka")[4:]) == CLIENTS
    assert source_of_first_request(_frame("replica-x")[4:]) == CLIENTS
    assert source_of_first_request(b"\x00\x01") == CLIENTS


def test_bytes_pass_both_ways_and_blackholed_bytes_arrive_in_order_once_healed(proxy):
    echo = Echo()
    port = proxy.front(1, echo.port)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        first = _frame("replica-2")
        sock.sendall(first)
        assert _read(sock, len(first)) == first
        assert proxy.connections[(2, 1)] == 1

        proxy.set(2, 1, RESPONSES, BLACKHOLE)  # the echo receives, the answer is held
        sock.sendall(b"held")
        with echo.got:
            assert echo.got.wait_for(lambda: echo.received == len(first) + 4, WAIT_S)
        proxy.set(2, 1, REQUESTS, BLACKHOLE)
        sock.sendall(b"more")
        proxy.heal()
        assert _read(sock, 8) == b"heldmore"  # nothing lost, nothing reordered


def test_drop_closes_the_connection_when_bytes_would_go_that_way(proxy):
    echo = Echo()
    port = proxy.front(1, echo.port)
    proxy.set(CLIENTS, 1, RESPONSES, DROP)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        first = _frame("rdkafka")
        sock.sendall(first)
        assert _read(sock, len(first)) == b""  # closed instead of answered
    with echo.got:  # the request itself went through: a lost answer, not a lost request
        assert echo.got.wait_for(lambda: echo.received == len(first), WAIT_S)
    assert proxy.dropped[(CLIENTS, 1)] == 1
    proxy.set(2, 1, REQUESTS, DROP)  # another link: untouched
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        proxy.heal()
        first = _frame("rdkafka")
        sock.sendall(first)
        assert _read(sock, len(first)) == first


def test_a_delay_holds_each_chunk_at_least_that_long(proxy):
    echo = Echo()
    port = proxy.front("zk", echo.port, source=3)  # a fixed source: no Kafka header read
    proxy.set(3, "zk", REQUESTS, Delay(0.3))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        started = time.monotonic()
        sock.sendall(b"ping")
        assert _read(sock, 4) == b"ping"
        assert time.monotonic() - started >= 0.3
    assert proxy.connections[(3, "zk")] == 1
