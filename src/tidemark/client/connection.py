"""Blocking Kafka-protocol connections for the requests confluent-kafka's AdminClient cannot send,
or not in batches: OffsetDelete (KIP-496), FindCoordinator for many groups, DescribeGroups and
OffsetFetch (v8+, many groups) per coordinator. PLAINTEXT listeners only.

Each connection asks ApiVersions once and every request goes at the highest version both sides
speak, so the same code talks to tidemark and to any Kafka broker.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.client.errors import ClientError
from tidemark.client.reach import split_host_port
from tidemark.wire.api_keys import ApiKey
from tidemark.wire.client import decode_response, encode_request, load_request_schema

_SIZE = struct.Struct(">i")
CLIENT_ID = "tidemark-admin"
RETRIABLE_COORDINATOR_ERRORS = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                          ErrorCode.not_coordinator})
RETRY_BACKOFF_S = 0.1
# Requests in flight on one connection (Kafka serves 5 by default before it stops reading; more
# just wait in the socket buffers, which a few dozen small requests fit in).
PIPELINE_DEPTH = 32


def error_name(code: ErrorCode | int) -> str:
    """Kafka's name of an error code, as its tools print it (GROUP_ID_NOT_FOUND)."""
    return ErrorCode(code).name.upper()


def _highest_known(api_key: int, high: int) -> int:
    """The highest version up to `high` the codec has a schema for."""
    for version in range(high, -1, -1):
        try:
            load_request_schema(api_key, version)
            return version
        except Exception:  # noqa: BLE001 - kio raises its own lookup errors for versions it lacks
            continue
    return -1


class Connection:
    """One blocking connection; requests are answered one at a time, every wait bounded by the
    deadline the connection was opened with."""

    def __init__(self, host: str, port: int, deadline: float, client_id: str = CLIENT_ID) -> None:
        self.host, self.port = host, port
        self.deadline = deadline
        self.client_id = client_id
        self._sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.01))
        self._correlation_id = 0
        self._versions: dict[int, tuple[int, int]] | None = None

    def close(self) -> None:
        self._sock.close()

    def version(self, api_key: ApiKey, highest: int, required: bool = True) -> int:
        """The version to send `api_key` at: the highest the broker, the codec and the caller
        (`highest`) all speak; when there is none, ClientError, or -1 if not `required`."""
        if self._versions is None:
            answer = self.request(ApiKey.API_VERSIONS, 0, {})
            self._versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in answer.api_keys}
        low, high = self._versions.get(int(api_key), (0, -1))
        version = _highest_known(int(api_key), min(high, highest))
        if version < low or version < 0:
            if not required:
                return -1
            raise ClientError(f"Error: the broker at {self.host}:{self.port} does not serve {api_key.name} "
                              f"at a version this tool speaks")
        return version

    def request(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
        self._send(api_key, version, body)
        return self._receive(api_key, version, self._correlation_id)

    def request_frame(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> bytes:
        """The response to `body` as its raw frame (header included, size prefix not), for the
        answers the codec cannot read (DescribeTransactions' -1 start time)."""
        self._send(api_key, version, body)
        frame = self._read(_SIZE.unpack(self._read(4))[0])
        (correlation_id,) = _SIZE.unpack_from(frame)
        if correlation_id != self._correlation_id:
            raise ConnectionError(f"response {correlation_id} to request {self._correlation_id}")
        return frame

    def _send(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> None:
        self._correlation_id += 1
        payload = encode_request(int(api_key), version, self._correlation_id, body, self.client_id)
        self._settimeout()
        self._sock.sendall(_SIZE.pack(len(payload)) + payload)

    def pipeline(self, api_key: ApiKey, version: int, bodies: Sequence[dict[str, Any]]) -> list[Any]:
        """Many requests in flight at once (at most PIPELINE_DEPTH), their responses in order:
        Kafka brokers answer a connection's requests in the order sent."""
        sent: list[int] = []
        responses: list[Any] = []
        for body in bodies:
            if len(sent) - len(responses) >= PIPELINE_DEPTH:
                responses.append(self._receive(api_key, version, sent[len(responses)]))
            self._correlation_id += 1
            sent.append(self._correlation_id)
            payload = encode_request(int(api_key), version, self._correlation_id, body, self.client_id)
            self._settimeout()
            self._sock.sendall(_SIZE.pack(len(payload)) + payload)
        while len(responses) < len(sent):
            responses.append(self._receive(api_key, version, sent[len(responses)]))
        return responses

    def _receive(self, api_key: ApiKey, version: int, expected: int) -> Any:
        (size,) = _SIZE.unpack(self._read(4))
        correlation_id, response = decode_response(int(api_key), version, self._read(size))
        if correlation_id != expected:
            raise ConnectionError(f"response {correlation_id} to request {expected}")
        return response

    def call(self, api_key: ApiKey, highest: int, body: dict[str, Any]) -> tuple[int, Any]:
        """(version sent, response) of `body` at the best version up to `highest`."""
        version = self.version(api_key, highest)
        return version, self.request(api_key, version, body)

    def _settimeout(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self._sock.settimeout(remaining)

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            self._settimeout()
            chunk = self._sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            data += chunk
        return bytes(data)


def connect_any(bootstrap: str, deadline: float) -> Connection:
    """A connection to the first server of the comma list that accepts one."""
    last: Exception | None = None
    for server in (part.strip() for part in bootstrap.split(",")):
        host, port = split_host_port(server)
        if server and port is not None:
            try:
                return Connection(host, port, deadline)
            except OSError as exc:
                last = exc
    raise last or OSError(f"no HOST:PORT in {bootstrap!r}")


class Brokers:
    """Connections to a cluster's brokers by node id, opened on demand from the bootstrap's
    Metadata, closed together; and the coordinators of groups (FindCoordinator, batched from v4)."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self._bootstrap: Connection | None = None
        self._by_node: dict[int, Connection] = {}
        self._addresses: dict[int, tuple[str, int]] = {}

    def __enter__(self) -> Brokers:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in {id(c): c for c in [*self._by_node.values(), self._bootstrap] if c is not None}.values():
            connection.close()
        self._by_node.clear()
        self._bootstrap = None

    def any(self) -> Connection:
        if self._bootstrap is None:
            self._bootstrap = connect_any(self.bootstrap, self.deadline)
        return self._bootstrap

    def node(self, node_id: int, host: str | None = None, port: int | None = None) -> Connection:
        connection = self._by_node.get(node_id)
        if connection is None:
            if host is None or port is None:
                if node_id not in self._addresses:
                    self._load_brokers()
                host, port = self._addresses[node_id]
            connection = Connection(host, port, self.deadline)
            self._by_node[node_id] = connection
        return connection

    def _load_brokers(self) -> None:
        _version, metadata = self.any().call(ApiKey.METADATA, 12, {
            "topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        self._addresses = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}

    def leaders(self, topics: Iterable[str]) -> dict[tuple[str, int], int]:
        """The leader node of each partition of these topics (partitions without one left out)."""
        _version, metadata = self.any().call(ApiKey.METADATA, 12, {
            "topics": [{"name": topic, "topic_id": None} for topic in sorted(set(topics))],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        self._addresses = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
        return {(t.name, int(p.partition_index)): int(p.leader_id) for t in metadata.topics
                if t.error_code == ErrorCode.none for p in t.partitions if int(p.leader_id) >= 0}

    def offsets_by_time(self, asks: Mapping[tuple[str, int], Iterable[int]]
                        ) -> dict[tuple[tuple[str, int], int], int | None]:
        """ListOffsets by timestamp for many (partition, time) pairs: per leader, one request per
        round with each partition at most once (Kafka refuses one twice), the rounds pipelined.
        None where nothing is stamped that late or the partition failed."""
        leaders = self.leaders(topic for topic, _p in asks)
        found: dict[tuple[tuple[str, int], int], int | None] = {}
        by_node: dict[int, dict[tuple[str, int], list[int]]] = {}
        for tp, times in asks.items():
            times = sorted(set(times))
            if tp not in leaders:
                found.update(((tp, ts), None) for ts in times)
            else:
                by_node.setdefault(leaders[tp], {})[tp] = times
        for node_id, mine in sorted(by_node.items()):
            connection = self.node(node_id)
            version = connection.version(ApiKey.LIST_OFFSETS, 7)
            if version < 1:
                raise ClientError(f"Error: the broker at {connection.host}:{connection.port} cannot look up "
                                  f"offsets by time (ListOffsets v1+)")
            rounds = []
            for i in range(max(len(times) for times in mine.values())):
                topics: dict[str, list[dict[str, int]]] = {}
                for (topic, partition), times in mine.items():
                    if i < len(times):
                        topics.setdefault(topic, []).append(
                            {"partition_index": partition, "timestamp": times[i], "current_leader_epoch": -1})
                rounds.append({"replica_id": -1, "isolation_level": 0,
                               "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
            for i, response in enumerate(connection.pipeline(ApiKey.LIST_OFFSETS, version, rounds)):
                for t in response.topics:
                    for p in t.partitions:
                        tp = (t.name, int(p.partition_index))
                        offset = int(p.offset)
                        found[(tp, mine[tp][i])] = offset if p.error_code == ErrorCode.none and offset >= 0 else None
        return found

    def coordinators(self, groups: Sequence[str]) -> dict[str, tuple[int, str, int] | ErrorCode]:
        """Each group's coordinator (node id, host, port), or the error FindCoordinator answered
        once retrying the retriable ones (a coordinator loading, moving) ran out of time."""
        found: dict[str, tuple[int, str, int] | ErrorCode] = {}
        todo = list(dict.fromkeys(groups))
        while todo:
            answers = self._find(todo)
            retry = []
            for group in todo:
                code, node = answers[group]
                if code == ErrorCode.none:
                    found[group] = node
                elif code in RETRIABLE_COORDINATOR_ERRORS and time.monotonic() + RETRY_BACKOFF_S < self.deadline:
                    retry.append(group)
                else:
                    found[group] = code
            todo = retry
            if todo:
                time.sleep(RETRY_BACKOFF_S)
        return found

    def _find(self, groups: Sequence[str]) -> dict[str, tuple[ErrorCode, tuple[int, str, int]]]:
        connection = self.any()
        version = connection.version(ApiKey.FIND_COORDINATOR, 4)
        answers = {}
        if version >= 4:
            response = connection.request(ApiKey.FIND_COORDINATOR, version,
                                          {"key_type": 0, "coordinator_keys": list(groups)})
            for c in response.coordinators:
                answers[c.key] = (c.error_code, (int(c.node_id), c.host, int(c.port)))
            return answers
        for group in groups:  # brokers before Kafka 3.0: one group a request
            r = connection.request(ApiKey.FIND_COORDINATOR, version, {"key": group, "key_type": 0})
            answers[group] = (r.error_code, (int(r.node_id), r.host, int(r.port)))
        return answers

    def by_coordinator(self, groups: Iterable[str]) -> tuple[dict[int, list[str]], dict[str, ErrorCode]]:
        """The groups grouped by coordinator node (connections opened), and the groups that have none."""
        grouped: dict[int, list[str]] = {}
        failed: dict[str, ErrorCode] = {}
        for group, found in self.coordinators(list(groups)).items():
            if isinstance(found, ErrorCode):
                failed[group] = found
            else:
                node_id, host, port = found
                self.node(node_id, host, port)
                grouped.setdefault(node_id, []).append(group)
        return grouped, failed


def offset_delete(bootstrap: str, timeout_s: float, group: str, partitions: Sequence[tuple[str, int]]
                  ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """OffsetDelete at the group's coordinator: the top-level and per-partition errors."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    body = {"group_id": group, "topics": [{"name": topic, "partitions": [{"partition_index": p} for p in ps]}
                                          for topic, ps in by_topic.items()]}
    last = "no answer"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with Brokers(bootstrap, max(deadline - time.monotonic(), 0.01)) as brokers:
                found = brokers.coordinators([group])[group]
                if isinstance(found, ErrorCode):
                    if found not in RETRIABLE_COORDINATOR_ERRORS:
                        raise ClientError(f"Error: finding the coordinator of group '{group}' failed against "
                                          f"{bootstrap}: {error_name(found)}")
                    last = error_name(found)
                else:
                    _version, response = brokers.node(*found).call(ApiKey.OFFSET_DELETE, 0, body)
                    if response.error_code not in RETRIABLE_COORDINATOR_ERRORS:
                        return response.error_code, {(topic.name, int(p.partition_index)): p.error_code
                                                     for topic in response.topics for p in topic.partitions}
                    last = error_name(response.error_code)
        except (TimeoutError, socket.timeout):
            raise ClientError(f"Error: deleting offsets of group '{group}' timed out after {timeout_s:g}s "
                              f"against {bootstrap}") from None
        except (OSError, ConnectionError) as exc:
            last = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
        if time.monotonic() + RETRY_BACKOFF_S >= deadline:
            raise ClientError(f"Error: deleting offsets of group '{group}' failed against {bootstrap}: {last}")
        time.sleep(RETRY_BACKOFF_S)
