"""Brokers with several listeners (the `listeners` setting instead of --listen), SCRAM users
made with `tidemark users`, and TLS material made at test time with openssl."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import STARTUP_TIMEOUT_S, BrokerProcess, free_port
from tidemark.wire.client import decode_response, encode_request_with_kio

PASSWORD = "alice-secret"
IO_TIMEOUT_S = 30.0  # a hang guard on every socket read


class ListenersBroker(BrokerProcess):
    """`tidemark serve` with `listeners`: ports[name] is where each listener is bound."""

    def __init__(self, data_dir: Path, listeners: dict[str, str], settings: dict[str, str] | None = None) -> None:
        self.ports = {name: free_port() for name in listeners}
        self.protocols = listeners
        text = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        protocol_map = ",".join(f"{name}:{protocol}" for name, protocol in listeners.items())
        merged = {"listeners": text, "listener.security.protocol.map": protocol_map,
                  "inter.broker.listener.name": next(n for n, p in listeners.items() if p == "PLAINTEXT")
                  if "PLAINTEXT" in listeners.values() else next(iter(listeners)),
                  "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4",
                  **(settings or {})}
        super().__init__(data_dir, merged, port=next(iter(self.ports.values())))

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.ports[name]}"

    def start(self) -> ListenersBroker:
        args = [sys.executable, "-m", "tidemark.cli", "serve", "--data-dir", str(self.data_dir), "--log-format", "json"]
        for key, value in self.settings.items():
            args += ["--set", f"{key}={value}"]
        log_file = open(self.log_path, "ab")
        self._log_offset = log_file.tell()
        self.process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, env=dict(os.environ))
        log_file.close()
        self.wait_for_log("tidemark listening on", timeout_s=STARTUP_TIMEOUT_S * 4)
        return self


def add_user(data_dir: Path, name: str, password: str, *mechanisms: str, where: tuple[str, ...] = ()) -> str:
    """`tidemark users add` (offline, before the broker starts, or against ZooKeeper)."""
    password_file = data_dir.parent / f"{name}.password"
    password_file.write_text(password + "\n")
    args = [sys.executable, "-m", "tidemark.cli", "users", "add", name, "--password-file", str(password_file)]
    for mechanism in mechanisms or ("SCRAM-SHA-512",):
        args += ["--mechanism", mechanism]
    args += list(where or ("--data-dir", str(data_dir)))
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=120).stdout


# -- raw protocol ---------------------------------------------------------------------------------


class RawClient:
    """A blocking Kafka-protocol client for the handshake rules: one request, one answer."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
        self.correlation = 0

    def send(self, api_key: int, version: int, body: dict[str, Any]) -> int:
        self.correlation += 1
        payload = encode_request_with_kio(api_key, version, self.correlation, body, client_id="raw")
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        return self.correlation

    def send_raw(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def receive_frame(self) -> bytes | None:
        """The next frame, or None when the broker closed the connection."""
        size = self._read(4)
        if size is None:
            return None
        body = self._read(struct.unpack(">i", size)[0])
        return body

    def receive(self, api_key: int, version: int) -> Any:
        frame = self.receive_frame()
        assert frame is not None, "the broker closed the connection"
        return decode_response(api_key, version, frame)[1]

    def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self.send(api_key, version, body)
        return self.receive(api_key, version)

    def closed_by_broker(self) -> bool:
        """Reads until the broker closes (True) or answers something (False)."""
        return self._read(1) is None

    def _read(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            try:
                chunk = self.sock.recv(count - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()


# -- TLS material ---------------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> dict[str, Path]:
    """A CA, the broker's certificate (localhost, 127.0.0.1) and two clients' (alice, signed by
    the CA; mallory, self-signed), as PEM files."""
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=tidemark-test-ca", cwd=directory)
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, subject in (("broker", "/CN=localhost"), ("alice", "/C=NO/O=tidemark/OU=eng/CN=alice")):
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=directory)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", *(["-extfile", "san.ext"] if name == "broker" else []),
                 cwd=directory)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "mallory.key", "-out", "mallory.pem", "-days", "2", "-subj", "/CN=mallory", cwd=directory)
    return {name: directory / name for name in ("ca.pem", "broker.pem", "broker.key", "alice.pem", "alice.key",
                                                 "mallory.pem", "mallory.key")}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def stop(process: BrokerProcess) -> None:
    try:
        process.stop()
    finally:
        process.kill()


def wait_until(condition, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met within the hang guard"
        time.sleep(0.05)
