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

from tidemark.cli.options import DEFAULT_TIMEOUT_MS
from tidemark.cli.output import CliError, CommandGroup, format_table
from tidemark.client.connection import RETRIABLE_COORDINATOR_ERRORS, RETRY_BACKOFF_S, Brokers, Connection
from tidemark.client.errors import ClientError
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.primitives import Reader

# The transaction coordinator's key type in FindCoordinator (v1+).
TRANSACTION_KEY_TYPE = 1
_STATE_FIXED = struct.Struct(">iqqh")  # timeout, start time, producer id, producer epoch


# DescribeTransactions v0 answers -1 as the start time of a transaction not started (Kafka's
# value), which kio's timestamp reader refuses: the response is read here.

def read_describe_transactions(frame: bytes) -> list[dict[str, Any]]:
    """The transaction states of a DescribeTransactions v0 response frame (header v1 included)."""
    reader = Reader(frame, 4)  # past the correlation id
    reader.skip_tagged_fields()  # of the header
    reader.int32()  # throttle time
    states = []
    for _ in range(reader.compact_count(2)):
        error_code = reader.int16()
        transactional_id = reader.compact_string()
        state = reader.compact_string()
        timeout, start, producer_id, epoch = reader.unpack(_STATE_FIXED)
        topics: list[tuple[str, list[int]]] = []
        for _ in range(reader.compact_count(2)):
            topic = reader.compact_string()
            partitions = [reader.int32() for _ in range(reader.compact_count(4))]
            reader.skip_tagged_fields()
            topics.append((topic, partitions))
        reader.skip_tagged_fields()
        states.append({"error_code": ErrorCode(error_code), "transactional_id": transactional_id, "state": state,
                       "timeout_ms": timeout, "start_ms": start, "producer_id": producer_id,
                       "producer_epoch": epoch, "topics": topics})
    return states


def _find_coordinator(connection: Connection, transactional_id: str) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) of the transactional id's coordinator."""
    version = connection.version(ApiKey.FIND_COORDINATOR, 4)
    if version < 1:
        raise ClientError(f"Error: the broker at {connection.host}:{connection.port} cannot find transaction "
                          f"coordinators (FindCoordinator v1+)")
    if version >= 4:
        found = connection.request(ApiKey.FIND_COORDINATOR, version, {
            "key_type": TRANSACTION_KEY_TYPE, "coordinator_keys": [transactional_id]})
        (c,) = found.coordinators
    else:
        c = connection.request(ApiKey.FIND_COORDINATOR, version,
                               {"key": transactional_id, "key_type": TRANSACTION_KEY_TYPE})
    return c.error_code, int(c.node_id), c.host, int(c.port)


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


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
def transactions() -> None:
    """Inspect transactional producers of any Kafka cluster (like kafka-transactions.sh)."""


def _failed(what: str, bootstrap: str, exc: BaseException) -> CliError:
    if isinstance(exc, TimeoutError | socket.timeout):
        return CliError(f"Error: {what} timed out against {bootstrap}")
    return CliError(f"Error: {what} failed against {bootstrap}: {exc}")


@transactions.command("list")
@_options
def list_command(bootstrap: str, timeout_ms: int) -> None:
    """Every transactional id the cluster's coordinators know, with its producer id and state."""
    rows = []
    try:
        with Brokers(bootstrap, timeout_ms / 1000) as brokers:
            _version, metadata = brokers.any().call(ApiKey.METADATA, 12,
                                                    {"topics": [], "allow_auto_topic_creation": False,
                                                     "include_topic_authorized_operations": False})
            for broker in sorted(metadata.brokers, key=lambda b: b.node_id):
                connection = brokers.node(int(broker.node_id), broker.host, int(broker.port))
                while True:
                    _version, listed = connection.call(ApiKey.LIST_TRANSACTIONS, 0,
                                                       {"state_filters": [], "producer_id_filters": []})
                    if (listed.error_code not in RETRIABLE_COORDINATOR_ERRORS
                            or time.monotonic() + RETRY_BACKOFF_S >= brokers.deadline):
                        break
                    time.sleep(RETRY_BACKOFF_S)
                if listed.error_code != ErrorCode.none:
                    raise CliError(f"Error: listing transactions of broker {broker.node_id} failed: "
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
            state = None
            # A fresh look-up each round: the coordinator may have moved (NOT_COORDINATOR).
            with Brokers(bootstrap, max(deadline - time.monotonic(), 0.01)) as brokers:
                code, node_id, host, port = _find_coordinator(brokers.any(), transactional_id)
                if code == ErrorCode.none:
                    connection = brokers.node(node_id, host, port)
                    connection.version(ApiKey.DESCRIBE_TRANSACTIONS, 0)
                    (state,) = read_describe_transactions(connection.request_frame(
                        ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}))
                    code = state["error_code"]
            if code not in RETRIABLE_COORDINATOR_ERRORS or time.monotonic() + RETRY_BACKOFF_S >= deadline:
                break
            time.sleep(RETRY_BACKOFF_S)
    except (OSError, ConnectionError, TimeoutError) as exc:
        raise _failed(f"describing transactional id '{transactional_id}'", bootstrap, exc) from None
    if code != ErrorCode.none or state is None:
        raise CliError(f"Error: describing transactional id '{transactional_id}' failed: {code.name.upper()}")
    now_ms = int(time.time() * 1000)
    start = state["start_ms"]
    partitions = ",".join(f"{topic}-{p}" for topic, ps in state["topics"] for p in ps)
    click.echo(format_table(
        ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
         "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
        [(node_id, transactional_id, state["producer_id"], state["producer_epoch"], state["state"],
          state["timeout_ms"], start if start >= 0 else "None", now_ms - start if start >= 0 else "None",
          partitions)]))
