"""`tidemark groups`: list and describe consumer groups over the Kafka protocol.

Everything goes through confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets), so these commands work against tidemark or any other Kafka cluster:

    tidemark groups list --bootstrap-server HOST:PORT [--state]
    tidemark groups describe GROUP --bootstrap-server HOST:PORT [--members [--verbose] | --state]

Output follows kafka-consumer-groups.sh: plain space-aligned columns, "-" for an unknown value,
no colours, so it can be grepped and cut. Errors go to stderr as one line and exit with code 1.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import click
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

DEFAULT_TIMEOUT_MS = 10_000
UNKNOWN = "-"


class GroupsError(click.ClickException):
    """A one-line error on stderr and exit code 1."""

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks: easy to grep and cut."""
    cells = [list(headers)] + [["-" if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells)


def _parse_config(values: Sequence[str]) -> dict[str, str]:
    config: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--client-config")
        config[key.strip()] = value
    return config


class Cluster:
    """An AdminClient with every wait bounded by one timeout, reachability checked up front."""

    def __init__(self, bootstrap: str, timeout_ms: int, extra: dict[str, str]) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_ms / 1000.0
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": "tidemark-groups",
            "socket.timeout.ms": max(timeout_ms, 10),
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            # librdkafka would print its own connection noise to stderr; our one-line error says it.
            "log_level": 0,
            "error_cb": lambda _error: None,
            **extra,
        }
        try:
            self.admin = AdminClient(config)
        except KafkaException as exc:
            raise GroupsError(f"Error: invalid client configuration for {bootstrap}: {_describe(exc)}") from exc

    def check_reachable(self) -> None:
        """Open a TCP connection to a bootstrap server first: an address nobody listens on then fails
        at once with one clear line instead of every admin call timing out. (The admin calls that
        follow carry their own bounded timeouts for anything else going wrong.)"""
        deadline = time.monotonic() + self.timeout_s
        last = "no address given"
        for server in (part.strip() for part in self.bootstrap.split(",")):
            if not server:
                continue
            host, port = _split_host_port(server)
            if port is None:
                last = f"{server!r} is not HOST:PORT"
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                last = "timed out"
                break
            try:
                with socket.create_connection((host, port), timeout=remaining):
                    return
            except OSError as exc:
                last = exc.strerror or str(exc) or type(exc).__name__
        raise GroupsError(f"Error: cannot reach bootstrap server {self.bootstrap}: {last}")

    def wait(self, future: Future, what: str) -> Any:
        try:
            return future.result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            raise GroupsError(f"Error: {what} failed against {self.bootstrap}: {self._explain(exc)}") from exc
        except TimeoutError as exc:
            raise GroupsError(f"Error: {what} timed out after {self.timeout_s:g}s against {self.bootstrap}") from exc

    def _explain(self, exc: KafkaException) -> str:
        text = _describe(exc)
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT:
            text += f" (no answer within {self.timeout_s:g}s)"
        return text

    def list_groups(self) -> list[tuple[str, str]]:
        result = self.wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "listing groups")
        if result.errors:
            # Kafka's tool fails when any broker could not be listed; do the same, naming the first.
            raise GroupsError(f"Error: listing groups failed against {self.bootstrap}: {_describe(result.errors[0])}")
        return sorted((listing.group_id, _state_name(listing.state)) for listing in result.valid)

    def describe(self, group: str) -> ConsumerGroupDescription:
        futures = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)
        try:
            description = futures[group].result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                raise GroupsError(f"Consumer group '{group}' does not exist.") from exc
            raise GroupsError(f"Error: describing group '{group}' failed against {self.bootstrap}: "
                              f"{self._explain(exc)}") from exc
        except TimeoutError as exc:
            raise GroupsError(f"Error: describing group '{group}' timed out after {self.timeout_s:g}s "
                              f"against {self.bootstrap}") from exc
        if description.state in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN) and not description.members:
            raise GroupsError(f"Consumer group '{group}' does not exist.")
        return description

    def committed(self, group: str) -> dict[tuple[str, int], int | None]:
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                         request_timeout=self.timeout_s)
        result = self.wait(futures[group], f"fetching offsets of group '{group}'")
        committed: dict[tuple[str, int], int | None] = {}
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise GroupsError(f"Error: fetching offset of {tp.topic}-{tp.partition} for group '{group}' "
                                  f"failed: {_describe(tp.error)}")
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return committed

    def log_end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
                                          request_timeout=self.timeout_s)
        ends: dict[tuple[str, int], int | None] = {}
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout=self.timeout_s + 1.0).offset
            except (KafkaException, TimeoutError):
                # Like Kafka's tool: a partition whose end offset is unknown shows "-" rather than failing.
                ends[(tp.topic, tp.partition)] = None
        return ends


def _split_host_port(server: str) -> tuple[str, int | None]:
    """"host:port" or "[v6addr]:port", optionally with a "PLAINTEXT://"-style scheme in front."""
    server = server.split("://", 1)[-1]
    host, sep, port = server.rpartition(":")
    if not sep or not port.isdigit():
        return server, None
    return host.strip("[]"), int(port)


def _describe(exc: BaseException | KafkaError) -> str:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(error, KafkaError):
        return error.str() or error.name()
    return str(error)


def _state_name(state: Any) -> str:
    if isinstance(state, ConsumerGroupState):
        return {
            ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
            ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
            ConsumerGroupState.STABLE: "Stable",
            ConsumerGroupState.DEAD: "Dead",
            ConsumerGroupState.EMPTY: "Empty",
        }.get(state, "Unknown")
    return str(state) if state else "Unknown"


@dataclass(frozen=True)
class Member:
    consumer_id: str
    host: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]


def _members(description: ConsumerGroupDescription) -> list[Member]:
    members = []
    for m in description.members:
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append(Member(m.member_id, m.host, m.client_id, tuple(sorted((tp.topic, tp.partition) for tp in tps))))
    return sorted(members, key=lambda member: (-len(member.partitions), member.consumer_id))


def _assignment_text(partitions: Sequence[tuple[str, int]]) -> str:
    if not partitions:
        return UNKNOWN
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{topic}({','.join(map(str, sorted(ps)))})" for topic, ps in sorted(by_topic.items()))


def _notes(group: str, state: str, members: Sequence[Member]) -> None:
    if state in ("PreparingRebalance", "CompletingRebalance"):
        click.echo(f"Warning: Consumer group '{group}' is rebalancing.", err=True)
    elif not members:
        click.echo(f"Consumer group '{group}' has no active members.")
        click.echo()


_common_options = [
    click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT",
                 help="Kafka protocol address(es) to bootstrap from, comma separated."),
    click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT_MS,
                 show_default=True, metavar="MS", help="Bound on every wait for the cluster, in milliseconds."),
    click.option("--client-config", "-X", "command_config", multiple=True, metavar="KEY=VALUE",
                 help="Extra client property (security.protocol, sasl.*, ssl.*); repeatable."),
]


def common_options(func: Any) -> Any:
    for option in reversed(_common_options):
        func = option(func)
    return func


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def groups() -> None:
    """Inspect consumer groups of any Kafka cluster (like kafka-consumer-groups.sh)."""


@groups.command("list")
@common_options
@click.option("--state", "show_state", is_flag=True, help="Add a STATE column.")
def list_command(bootstrap: str, timeout_ms: int, command_config: tuple[str, ...], show_state: bool) -> None:
    """List consumer groups, one group id per line."""
    cluster = Cluster(bootstrap, timeout_ms, _parse_config(command_config))
    cluster.check_reachable()
    listed = cluster.list_groups()
    if show_state:
        click.echo(format_table(["GROUP", "STATE"], listed))
    else:
        for group_id, _state in listed:
            click.echo(group_id)


@groups.command("describe")
@click.argument("group")
@common_options
@click.option("--members", "view", flag_value="members", help="One row per member with its partition count.")
@click.option("--state", "view", flag_value="state", help="Coordinator, assignment strategy, state and member count.")
@click.option("--offsets", "view", flag_value="offsets", default=True, help="Committed offsets and lag (default).")
@click.option("--verbose", is_flag=True, help="With --members: add each member's ASSIGNMENT.")
def describe_command(group: str, bootstrap: str, timeout_ms: int, command_config: tuple[str, ...], view: str,
                     verbose: bool) -> None:
    """Describe GROUP: offsets and lag per partition, its members, or its state."""
    cluster = Cluster(bootstrap, timeout_ms, _parse_config(command_config))
    cluster.check_reachable()
    description = cluster.describe(group)
    state = _state_name(description.state)
    members = _members(description)

    if view == "state":
        coordinator = description.coordinator
        coordinator_text = f"{coordinator.host}:{coordinator.port} ({coordinator.id})" if coordinator else UNKNOWN
        click.echo(format_table(
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [[group, coordinator_text, description.partition_assignor or UNKNOWN, state, len(members)]],
        ))
        return

    _notes(group, state, members)

    if view == "members":
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
        rows = []
        for m in members:
            row: list[object] = [group, m.consumer_id, m.host, m.client_id, len(m.partitions)]
            if verbose:
                row.append(_assignment_text(m.partitions))
            rows.append(row)
        click.echo(format_table(headers, rows))
        return

    committed = cluster.committed(group)
    owner: dict[tuple[str, int], Member] = {tp: m for m in members for tp in m.partitions}
    partitions = sorted(set(committed) | set(owner))
    ends = cluster.log_end_offsets(partitions)
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        m = owner.get(tp)
        rows.append([group, tp[0], tp[1], current, end, lag,
                     m.consumer_id if m else None, m.host if m else None, m.client_id if m else None])
    click.echo(format_table(
        ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"],
        rows,
    ))
