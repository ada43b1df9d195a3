"""`tidemark transactions list|describe`: transactional ids of any Kafka cluster, as
kafka-transactions.sh shows them (ListTransactions to every broker, FindCoordinator key type 1 and
DescribeTransactions to the id's coordinator)."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import click
from kio.schema.errors import ErrorCode

from tidemark.cli.groups import DEFAULT_TIMEOUT_MS, GroupsError, format_table
from tidemark.cli.reach import split_host_port
from tidemark.wire.client import decode_response, encode_request

METADATA, FIND_COORDINATOR, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 3, 10, 65, 66
_RETRIABLE = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}


class _Connection:
    """One blocking connection; every read and write bounded by the command's deadline."""

    def __init__(self, host: str, port: int, deadline: float) -> None:
        self.deadline = deadline
        self.sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.01))
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def frame(self, api_key: int, version: int, body: dict[str, Any]) -> bytes:
        self.correlation_id += 1
        payload = encode_request(api_key, version, self.correlation_id, body, "tidemark-transactions")
        self._timeout()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", self._read(4))
        return self._read(size)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        return decode_response(api_key, version, self.frame(api_key, version, body))[1]

    def _timeout(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            self._timeout()
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            data += chunk
        return bytes(data)


def _connect_any(bootstrap: str, deadline: float) -> _Connection:
    last: Exception | None = None
    for server in (part.strip() for part in bootstrap.split(",")):
        host, port = split_host_port(server)
        if server and port is not None:
            try:
                return _Connection(host, port, deadline)
            except OSError as exc:
                last = exc
    raise last or OSError(f"no HOST:PORT in {bootstrap!r}")


# DescribeTransactions v0 answers -1 as the start time of a transaction not started (Kafka's
# value), which kio's timestamp reader refuses: the response is read here.

def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _uvarint(data, pos)
    return data[pos:pos + length - 1].decode(), pos + length - 1


def _skip_tags(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def read_describe_transactions(frame: bytes) -> list[dict[str, Any]]:
    """The transaction states of a DescribeTransactions v0 response frame (header v1 included)."""
    pos = _skip_tags(frame, 4) + 4  # correlation id, header tags, throttle time
    count, pos = _uvarint(frame, pos)
    states = []
    for _ in range(count - 1):
        (error_code,) = struct.unpack_from(">h", frame, pos)
        transactional_id, pos = _string(frame, pos + 2)
        state, pos = _string(frame, pos)
        timeout, start, producer_id, epoch = struct.unpack_from(">iqqh", frame, pos)
        pos += 22
        topics: list[tuple[str, list[int]]] = []
        topic_count, pos = _uvarint(frame, pos)
        for _ in range(topic_count - 1):
            topic, pos = _string(frame, pos)
            n, pos = _uvarint(frame, pos)
            partitions = list(struct.unpack_from(f">{n - 1}i", frame, pos))
            pos = _skip_tags(frame, pos + 4 * (n - 1))
            topics.append((topic, partitions))
        pos = _skip_tags(frame, pos)
        states.append({"error_code": ErrorCode(error_code), "transactional_id": transactional_id, "state": state,
                       "timeout_ms": timeout, "start_ms": start, "producer_id": producer_id,
                       "producer_epoch": epoch, "topics": topics})
    return states


_common = [
    click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT",
                 help="Kafka protocol address(es) to bootstrap from, comma separated."),
    click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT_MS,
                 show_default=True, metavar="MS", help="Bound on every wait for the cluster, in milliseconds."),
]


def _options(func: Any) -> Any:
    for option in reversed(_common):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def transactions() -> None:
    """Inspect transactional producers of any Kafka cluster (like kafka-transactions.sh)."""


def _failed(what: str, bootstrap: str, exc: BaseException) -> GroupsError:
    if isinstance(exc, TimeoutError | socket.timeout):
        return GroupsError(f"Error: {what} timed out against {bootstrap}")
    return GroupsError(f"Error: {what} failed against {bootstrap}: {exc}")


@transactions.command("list")
@_options
def list_command(bootstrap: str, timeout_ms: int) -> None:
    """Every transactional id the cluster's coordinators know, with its producer id and state."""
    deadline = time.monotonic() + timeout_ms / 1000
    rows = []
    try:
        first = _connect_any(bootstrap, deadline)
        try:
            brokers = first.call(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False}).brokers
        finally:
            first.close()
        for broker in sorted(brokers, key=lambda b: b.node_id):
            connection = _Connection(broker.host, int(broker.port), deadline)
            try:
                while True:
                    listed = connection.call(LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
                    if listed.error_code not in _RETRIABLE or time.monotonic() + 0.1 >= deadline:
                        break
                    time.sleep(0.1)
            finally:
                connection.close()
            if listed.error_code != ErrorCode.none:
                raise GroupsError(f"Error: listing transactions of broker {broker.node_id} failed: "
                                  f"{listed.error_code.name.upper()}")
            rows += [(t.transactional_id, broker.node_id, t.producer_id, t.transaction_state)
                     for t in listed.transaction_states]
    except (OSError, ConnectionError, TimeoutError) as exc:
        raise _failed("listing transactions", bootstrap, exc) from None
    click.echo(format_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], sorted(rows)))


@transactions.command("describe")
@click.option("--transactional-id", "transactional_id", required=True, metavar="ID")
@_options
def describe_command(transactional_id: str, bootstrap: str, timeout_ms: int) -> None:
    """One transactional id as its coordinator holds it."""
    deadline = time.monotonic() + timeout_ms / 1000
    try:
        while True:
            first = _connect_any(bootstrap, deadline)
            try:
                found = first.call(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [transactional_id]})
            finally:
                first.close()
            (coordinator,) = found.coordinators
            state = None
            if coordinator.error_code == ErrorCode.none:
                connection = _Connection(coordinator.host, int(coordinator.port), deadline)
                try:
                    (state,) = read_describe_transactions(connection.frame(
                        DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}))
                finally:
                    connection.close()
                code = state["error_code"]
            else:
                code = coordinator.error_code
            if code not in _RETRIABLE or time.monotonic() + 0.1 >= deadline:
                break
            time.sleep(0.1)
    except (OSError, ConnectionError, TimeoutError) as exc:
        raise _failed(f"describing transactional id '{transactional_id}'", bootstrap, exc) from None
    if code != ErrorCode.none or state is None:
        raise GroupsError(f"Error: describing transactional id '{transactional_id}' failed: {code.name.upper()}")
    now_ms = int(time.time() * 1000)
    start = state["start_ms"]
    partitions = ",".join(f"{topic}-{p}" for topic, ps in state["topics"] for p in ps)
    click.echo(format_table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        [(coordinator.node_id, transactional_id, state["producer_id"], state["producer_epoch"], state["state"],
          state["timeout_ms"], start if start >= 0 else "None", now_ms - start if start >= 0 else "None",
          partitions)]))
