"""librdkafka acknowledges records without an offset, with no broker at fault: an idempotent
producer's batch answered REQUEST_TIMED_OUT (its records possibly persisted) while the next batch
of the partition is in flight is delivered as a success with no offset once that next batch
succeeds (librdkafka's implicit ack). Kafka answers so when a produce outlives its timeout before
the high watermark reaches it and the next one does not; here a proxy between the client and a
tidemark broker changes the first answer to REQUEST_TIMED_OUT once the second request is on its
way. The chaos tests' ledger (tests/zk/chaos_checks.py) holds such successes to their record
being in the log, not to an offset."""

from __future__ import annotations

import socket
import struct
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import free_port
from tests.integration.clients import create_topic
from tests.zk.chaos_checks import Ledger, delivery_recorder, offsetless_acks_missing
from tidemark.wire.primitives import read_uvarint

BOUND_S = 60  # a hang guard, never a margin
PRODUCE = 0
REQUEST_TIMED_OUT = 7


def _read_frame(sock: socket.socket) -> bytes | None:
    header = _read_exactly(sock, 4)
    if header is None:
        return None
    return _read_exactly(sock, struct.unpack(">i", header)[0])


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _with_error(frame: bytes, version: int, code: int) -> bytes:
    """A ProduceResponse of one partition with that partition's error code replaced."""
    flexible = version >= 9
    pos = 4  # correlation id
    if flexible:
        tags, pos = read_uvarint(frame, pos)
        assert tags == 0
        _, pos = read_uvarint(frame, pos)  # topics (compact array)
        if version >= 13:
            pos += 16  # topic id
        else:
            length, pos = read_uvarint(frame, pos)
            pos += length - 1
        _, pos = read_uvarint(frame, pos)  # partitions
    else:
        (length,) = struct.unpack_from(">h", frame, pos + 4)
        pos += 4 + 2 + length + 4  # topics count, name, partitions count
    pos += 4  # partition index
    return frame[:pos] + struct.pack(">h", code) + frame[pos + 2:]


class FirstProduceTimesOut:
    """A TCP proxy to a broker: the first Produce's response is held until a second Produce has
    reached the broker, then passed on as REQUEST_TIMED_OUT; everything else as it is."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.first_produce_sent = threading.Event()
        self.second_produce_sent = threading.Event()
        self.rewritten = threading.Event()
        self._lock = threading.Lock()
        self._produces = 0
        self._held: int | None = None  # correlation id of the first Produce
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            versions: dict[int, int] = {}  # correlation id -> Produce version, this connection
            threading.Thread(target=self._requests, args=(client, upstream, versions), daemon=True).start()
            threading.Thread(target=self._responses, args=(upstream, client, versions), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, versions: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
                if api_key == PRODUCE:
                    versions[correlation_id] = version
                    with self._lock:
                        self._produces += 1
                        if self._produces == 1:
                            self._held = correlation_id
                upstream.sendall(struct.pack(">i", len(frame)) + frame)
                if api_key == PRODUCE:
                    (self.first_produce_sent if self._produces == 1 else self.second_produce_sent).set()
        except OSError:
            pass

    def _responses(self, upstream: socket.socket, client: socket.socket, versions: dict[int, int]) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = struct.unpack_from(">i", frame)
                if correlation_id == self._held and correlation_id in versions:
                    assert self.second_produce_sent.wait(BOUND_S), "no second Produce while the first waited"
                    frame = _with_error(frame, versions[correlation_id], REQUEST_TIMED_OUT)
                    self._held = None
                    self.rewritten.set()
                client.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()


def test_a_batch_answered_timed_out_is_acknowledged_without_an_offset_when_the_next_succeeds(make_broker):
    port = free_port()
    proxy = FirstProduceTimesOut(port)
    broker = make_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"}, port=port).start()
    bootstrap = f"127.0.0.1:{proxy.port}"
    try:
        create_topic(bootstrap, "implicit", 1)
        ledger = Ledger()
        delivered = delivery_recorder(ledger, "implicit")
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 0, "message.timeout.ms": BOUND_S * 1000, "log_level": 0})
        producer.produce("implicit", b"first", partition=0, on_delivery=delivered)
        assert _poll_until(producer, proxy.first_produce_sent), "the first Produce never reached the broker"
        # Its answer is held until this one is on its way: both batches in flight at once.
        producer.produce("implicit", b"second", partition=0, on_delivery=delivered)
        assert _poll_until(producer, proxy.rewritten), "the first Produce was never answered"
        assert producer.flush(BOUND_S) == 0
    finally:
        proxy.close()
    assert ledger.produce_errors == []
    assert ledger.offsetless_acks == [(0, b"first", "")]  # a success, without its offset
    assert ledger.produced == {(0, 1): b"second"}

    read = _read_all(broker.bootstrap, "implicit", 2)
    assert read == {(0, 0): b"first", (0, 1): b"second"}  # written once, before the second
    assert offsetless_acks_missing(ledger, read) == []


def _poll_until(producer: Producer, event: threading.Event) -> bool:
    deadline = time.monotonic() + BOUND_S
    while not event.is_set() and time.monotonic() < deadline:
        producer.poll(0.05)
    return event.is_set()


def _read_all(bootstrap: str, topic: str, count: int) -> dict[tuple[int, int], bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "read", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + BOUND_S
    try:
        while len(read) < count and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                if message.error() is None:
                    read[(message.partition(), message.offset())] = message.value()
    finally:
        consumer.close()
    return read
