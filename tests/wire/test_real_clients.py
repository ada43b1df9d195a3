"""Decode the ApiVersions requests real clients send.

A throwaway socket server on 127.0.0.1 reads the first frame a client sends and closes;
every wait is bounded.
"""

import socket
import threading

import pytest

from tidemark.wire.codec import CODEC_API_RANGES
from tidemark.wire.codec import decode_request
from tidemark.wire.framing import FrameDecoder
from tidemark.wire.api_keys import ApiKey

SUPPORTED = dict(CODEC_API_RANGES)


class OneFrameServer:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(10)
        self.port = self.sock.getsockname()[1]
        self.frame = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(10)
            decoder = FrameDecoder(1 << 20)
            try:
                while self.frame is None:
                    data = conn.recv(65536)
                    if not data:
                        return
                    frames = decoder.feed(data)
                    if frames:
                        self.frame = frames[0]
            except OSError:
                return

    def wait(self, timeout=15):
        self.thread.join(timeout)
        self.sock.close()
        return self.frame


def test_kafka_python_api_versions():
    kafka = pytest.importorskip("kafka")
    server = OneFrameServer()
    with pytest.raises(Exception):
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=f"127.0.0.1:{server.port}",
            bootstrap_timeout_ms=2000,
            request_timeout_ms=3000,
            reconnect_backoff_max_ms=100,
        )
        consumer.close()
    frame = server.wait()
    assert frame is not None
    request = decode_request(frame, SUPPORTED)
    assert request.api_key == ApiKey.API_VERSIONS and not request.unsupported
    assert request.api_version == 4  # kafka-python 3.0 starts at ApiVersions v4
    assert request.client_id.startswith("kafka-python")
    assert request.body.client_software_name == "kafka-python"


def test_confluent_kafka_api_versions():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    server = OneFrameServer()
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{server.port}",
            "socket.timeout.ms": 2000,
            "reconnect.backoff.max.ms": 200,
        }
    )
    with pytest.raises(confluent_kafka.KafkaException):
        admin.list_topics(timeout=2)
    frame = server.wait()
    del admin
    assert frame is not None
    request = decode_request(frame, SUPPORTED)
    assert request.api_key == ApiKey.API_VERSIONS and not request.unsupported
    assert request.api_version == 3
    assert request.client_id  # rdkafka sends "rdkafka" by default
    assert request.body.client_software_name == "confluent-kafka-python"


def test_kafka_python_v4_gets_kip511_fallback_from_v3_broker():
    """kafka-python's ApiVersions v4 against a broker that stops at v3."""
    from kio.schema.api_versions.v0.response import ApiVersionsResponse
    from kio.schema.response_header.v0.header import ResponseHeader
    from kio.serial import entity_reader

    from tidemark.wire.codec import api_versions_fallback

    # The bytes kafka-python 3.0.12 sent in test_kafka_python_api_versions.
    frame = b"\x00\x12\x00\x04\x00\x00\x00\x01\x00\x13kafka-python-3.0.12\x00\rkafka-python\x073.0.12\x00"
    supported = {18: (0, 3), 3: (0, 12)}
    request = decode_request(frame, supported)
    assert request.unsupported and request.client_id == "kafka-python-3.0.12"
    out = api_versions_fallback(request, supported)
    (payload,) = FrameDecoder(1 << 20).feed(out)
    header, offset = entity_reader(ResponseHeader)(payload, 0)
    body, size = entity_reader(ApiVersionsResponse)(payload, offset)
    assert header.correlation_id == 1 and offset + size == len(payload)
    assert body.error_code == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in body.api_keys} == {(18, 0, 3), (3, 0, 12)}
