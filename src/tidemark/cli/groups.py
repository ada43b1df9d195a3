"""`tidemark groups`: list, describe, delete and reset consumer groups over the Kafka protocol.

Everything goes through confluent-kafka's AdminClient (ListGroups, DescribeGroups, DeleteGroups,
OffsetFetch, OffsetCommit, ListOffsets, Metadata), so these commands work against tidemark or any
other Kafka cluster:

    tidemark groups list --bootstrap-server HOST:PORT [--state]
    tidemark groups describe GROUP --bootstrap-server HOST:PORT [--members [--verbose] | --state]
                             [--zookeeper HOST:PORT]   (groups of ZooKeeper consumers too)
    tidemark groups delete GROUP... --bootstrap-server HOST:PORT
    tidemark groups delete-offsets GROUP --topic TOPIC[:P,...] --bootstrap-server HOST:PORT
    tidemark groups reset-offsets GROUP (--topic TOPIC[:P,...] | --all-topics) SCENARIO
                                  [--dry-run | --execute] [--export] --bootstrap-server HOST:PORT

The AdminClient has no OffsetDelete call, so delete-offsets sends FindCoordinator and OffsetDelete
(KIP-496) itself over a plain TCP connection (PLAINTEXT listeners only).

Output follows kafka-consumer-groups.sh: plain space-aligned columns, "-" for an unknown value,
no colours, so it can be grepped and cut. Errors go to stderr as one line and exit with code 1.
"""

from __future__ import annotations

import asyncio
import csv
import datetime
import io
import json
import re
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import click
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v1.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
from kio.schema.offset_delete.v0.request import (OffsetDeleteRequest, OffsetDeleteRequestPartition,
                                                 OffsetDeleteRequestTopic)
from kio.schema.offset_delete.v0.response import OffsetDeleteResponse
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i32

from tidemark import lag as lag_math
from tidemark.cli import group_lag
from tidemark.cli.reach import split_host_port, unreachable
from tidemark.cli.zk_groups import ZookeeperGroup, read_zookeeper
from tidemark.zk.offset_store import ZookeeperUnavailable

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
        """Fail at once with one clear line when no bootstrap server accepts a connection. (The admin
        calls that follow carry their own bounded timeouts for anything else going wrong.)"""
        why = unreachable(self.bootstrap, self.timeout_s)
        if why is not None:
            raise GroupsError(f"Error: cannot reach bootstrap server {self.bootstrap}: {why}")

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

    # -- what delete and reset-offsets need --------------------------------------------------

    def group_state(self, group: str) -> str:
        """The group's state name; "Dead" for a group the coordinator does not know."""
        futures = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)
        try:
            description = futures[group].result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            if exc.args and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return "Dead"
            raise GroupsError(f"Error: describing group '{group}' failed against {self.bootstrap}: "
                              f"{self._explain(exc)}") from exc
        except TimeoutError as exc:
            raise GroupsError(f"Error: describing group '{group}' timed out after {self.timeout_s:g}s "
                              f"against {self.bootstrap}") from exc
        return _state_name(description.state)

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic the cluster knows, with its partition ids (a Metadata request)."""
        try:
            metadata = self.admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise GroupsError(f"Error: fetching metadata failed against {self.bootstrap}: "
                              f"{self._explain(exc)}") from exc
        return {name: sorted(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}

    def offsets_for(self, partitions: Iterable[tuple[str, int]], spec: OffsetSpec,
                    what: str) -> dict[tuple[str, int], int]:
        """ListOffsets for every partition with one spec; any partition failing fails the command."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                          request_timeout=self.timeout_s)
        found: dict[tuple[str, int], int] = {}
        for tp, future in futures.items():
            info = self.wait(future, f"getting the {what} offset of {tp.topic}-{tp.partition}")
            found[(tp.topic, tp.partition)] = info.offset
        return found

    def alter_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o)
                                                       for (t, p), o in sorted(offsets.items())])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self.wait(futures[group], f"committing offsets for group '{group}'")
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise GroupsError(f"Error: committing the offset of {tp.topic}-{tp.partition} for group '{group}' "
                                  f"failed: {_describe(tp.error)}")

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        """group -> None when deleted, else the error's name (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
        futures = self.admin.delete_consumer_groups(list(group_ids), request_timeout=self.timeout_s)
        outcome: dict[str, str | None] = {}
        for group in group_ids:
            try:
                futures[group].result(timeout=self.timeout_s + 1.0)
                outcome[group] = None
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT:
                    raise GroupsError(f"Error: deleting group '{group}' failed against {self.bootstrap}: "
                                      f"{self._explain(exc)}") from exc
                outcome[group] = error.name() if isinstance(error, KafkaError) else str(error)
            except TimeoutError as exc:
                raise GroupsError(f"Error: deleting group '{group}' timed out after {self.timeout_s:g}s "
                                  f"against {self.bootstrap}") from exc
        return outcome


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
@click.argument("group_args", metavar="[GROUP]...", nargs=-1)
@click.option("--group", "group_opts", multiple=True, metavar="GROUP", help="A group to describe; repeatable.")
@click.option("--all-groups", is_flag=True, help="Describe every group the cluster lists.")
@common_options
@click.option("--members", "view", flag_value="members", help="One row per member with its partition count.")
@click.option("--state", "view", flag_value="state", help="Coordinator, assignment strategy, state and member count.")
@click.option("--offsets", "view", flag_value="offsets", default=True, help="Committed offsets and lag (default).")
@click.option("--verbose", is_flag=True, help="With --members: add each member's ASSIGNMENT.")
@click.option("--output", "output", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: one object per group (offsets view), for scripts.")
@click.option("--zookeeper", "zookeeper", metavar="HOST:PORT[/chroot]",
              help="Also groups of ZooKeeper consumers: offsets from /consumers/[group]/offsets, owners (offsets view).")
def describe_command(group_args: tuple[str, ...], group_opts: tuple[str, ...], all_groups: bool, bootstrap: str,
                     timeout_ms: int, command_config: tuple[str, ...], view: str, verbose: bool, output: str,
                     zookeeper: str | None) -> None:
    """Describe groups: offsets and lag per partition (in records and seconds, with Burrow's status),
    their members, or their state."""
    named = list(dict.fromkeys(group_args + group_opts))
    if bool(named) == all_groups:
        raise click.UsageError("give the groups (GROUP... or --group G, repeatable) or --all-groups")
    if output == "json" and view != "offsets":
        raise click.UsageError("--output json is for the offsets view")
    if zookeeper and view != "offsets":
        raise click.UsageError("--zookeeper is for the offsets view")
    config = _parse_config(command_config)
    cluster = Cluster(bootstrap, timeout_ms, config)
    cluster.check_reachable()
    listed = [group for group, _state in cluster.list_groups()] if all_groups or zookeeper else []
    zk_groups: dict[str, ZookeeperGroup] = {}
    if zookeeper:
        try:
            found = asyncio.run(read_zookeeper(zookeeper, [] if all_groups else named, cluster.timeout_s))
        except ZookeeperUnavailable as exc:
            raise GroupsError(f"Error: cannot read ZooKeeper {zookeeper}: {exc}") from exc
        zk_groups = {group.name: group for group in found}
    names = sorted(set(listed) | set(zk_groups)) if all_groups else named
    failed = False
    described: list[dict[str, Any]] = []
    for number, group in enumerate(names):
        try:
            in_zookeeper = zk_groups.get(group)
            on_cluster = in_zookeeper is None or group in listed
            if in_zookeeper and on_cluster and not in_zookeeper.members:
                # A cluster group without ZooKeeper consumers: its znode offsets are the broker's own
                # storage (offsets.storage=zookeeper), the same offsets the cluster view shows.
                in_zookeeper = None
            if output == "json":
                if in_zookeeper:
                    described.append(_describe_zookeeper(cluster, in_zookeeper))
                if on_cluster:
                    described.append(_describe_offsets(cluster, group, config)[0])
                continue
            if number and view != "state":
                click.echo()
            if in_zookeeper:
                _print_zookeeper(cluster, in_zookeeper)
                if on_cluster:
                    click.echo()
            if on_cluster:
                _describe_one(cluster, group, view, verbose, config)
        except GroupsError as exc:
            if len(names) == 1:
                raise
            exc.show()
            failed = True
    if output == "json":
        click.echo(json.dumps(described, indent=2))
    if failed:
        raise click.exceptions.Exit(1)


_OFFSETS_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                    "CLIENT-ID", "LAG-SECONDS", "STATUS"]


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


def _describe_offsets(cluster: Cluster, group: str, config: dict[str, str]
                      ) -> tuple[dict[str, Any], list[Member]]:
    """The offsets view of one group as a JSON-ready dict, and its members."""
    description = cluster.describe(group)
    state = _state_name(description.state)
    members = _members(description)
    committed = cluster.committed(group)
    owner: dict[tuple[str, int], Member] = {tp: m for m in members for tp in m.partitions}
    partitions = sorted(set(committed) | set(owner))
    ends = cluster.log_end_offsets(partitions)
    deadline = time.monotonic() + cluster.timeout_s
    consumer = group_lag.probe_consumer(cluster.bootstrap, int(cluster.timeout_s * 1000), config)
    try:
        known = {tp: offset for tp, offset in committed.items() if offset is not None}
        stamps = group_lag.first_unconsumed_timestamps(consumer, known, ends, deadline)
        history = group_lag.commit_histories(consumer, [group], deadline)[group]
        windows = group_lag.lag_windows(consumer, history, ends, deadline)
    finally:
        consumer.close()
    now_ms = int(time.time() * 1000)
    rows = []
    for tp in partitions:
        current, end = committed.get(tp), ends.get(tp)
        lag = lag_math.records_lag(current, end)
        window = windows.get(tp, [])
        m = owner.get(tp)
        rows.append({
            "topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end, "lag": lag,
            "lag_seconds": _seconds(lag_math.time_lag_ms(now_ms, lag, stamps.get(tp))),
            "last_commit_age_seconds": _seconds(now_ms - window[-1].timestamp_ms) if window else None,
            "status": lag_math.partition_status(window, lag, now_ms) if lag is not None else None,
            "consumer_id": m.consumer_id if m else None, "host": m.host if m else None,
            "client_id": m.client_id if m else None,
        })
    status = lag_math.group_status(row["status"] for row in rows if row["status"] is not None)
    return {"group": group, "state": state, "status": status, "partitions": rows}, members


def _describe_zookeeper(cluster: Cluster, group: ZookeeperGroup) -> dict[str, Any]:
    """The offsets view of a ZooKeeper consumers' group: its znode offsets, the owner thread of
    each partition, and the lag against the log end."""
    partitions = sorted(set(group.offsets) | set(group.owners))
    ends = cluster.log_end_offsets(partitions)
    rows = []
    for tp in partitions:
        current, end = group.offsets.get(tp), ends.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                     "lag": lag_math.records_lag(current, end), "lag_seconds": None, "last_commit_age_seconds": None,
                     "status": None, "consumer_id": group.owners.get(tp), "host": None, "client_id": None})
    return {"group": group.name, "storage": "zookeeper", "state": "Stable" if group.members else "Empty",
            "members": group.members, "partitions": rows}


def _print_zookeeper(cluster: Cluster, group: ZookeeperGroup) -> None:
    described = _describe_zookeeper(cluster, group)
    click.echo(f"Consumer group '{group.name}': offsets in ZooKeeper, {len(group.members)} live consumer(s).")
    click.echo()
    click.echo(format_table(_OFFSETS_HEADERS, [
        [group.name, row["topic"], row["partition"], row["current_offset"], row["log_end_offset"], row["lag"],
         row["consumer_id"], None, None, None, None] for row in described["partitions"]]))


def _describe_one(cluster: Cluster, group: str, view: str, verbose: bool, config: dict[str, str]) -> None:
    if view == "offsets":
        described, members = _describe_offsets(cluster, group, config)
        _notes(group, described["state"], members)
        click.echo(format_table(_OFFSETS_HEADERS, [
            [group, row["topic"], row["partition"], row["current_offset"], row["log_end_offset"], row["lag"],
             row["consumer_id"], row["host"], row["client_id"],
             None if row["lag_seconds"] is None else f"{row['lag_seconds']:.3f}", row["status"]]
            for row in described["partitions"]]))
        return
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
    headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if verbose else [])
    rows = []
    for m in members:
        row: list[object] = [group, m.consumer_id, m.host, m.client_id, len(m.partitions)]
        if verbose:
            row.append(_assignment_text(m.partitions))
        rows.append(row)
    click.echo(format_table(headers, rows))


# -- delete -----------------------------------------------------------------------------------


def _quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


@groups.command("delete")
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@common_options
def delete_command(group_ids: tuple[str, ...], bootstrap: str, timeout_ms: int,
                   command_config: tuple[str, ...]) -> None:
    """Delete consumer groups and their committed offsets. A group with members is not deleted."""
    cluster = Cluster(bootstrap, timeout_ms, _parse_config(command_config))
    cluster.check_reachable()
    outcome = cluster.delete_groups(list(dict.fromkeys(group_ids)))
    deleted = [group for group, error in outcome.items() if error is None]
    failed = {group: error for group, error in outcome.items() if error is not None}
    if not failed:
        click.echo(f"Deletion of requested consumer groups ({_quoted(deleted)}) was successful.")
        return
    click.echo("Error: Deletion of some consumer groups failed:", err=True)
    for group, error in failed.items():
        click.echo(f"* Group '{group}' could not be deleted due to: {error}", err=True)
    if deleted:
        click.echo(f"These consumer groups were deleted successfully: {_quoted(deleted)}")
    raise click.exceptions.Exit(1)


# -- delete-offsets: FindCoordinator + OffsetDelete on a plain connection ---------------------

_RETRIABLE_COORDINATOR_ERRORS = {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                 ErrorCode.not_coordinator}


def _error_name(code: ErrorCode) -> str:
    return code.name.upper()


class _Connection:
    """One blocking Kafka-protocol connection for the two requests the AdminClient cannot send."""

    def __init__(self, host: str, port: int, deadline: float) -> None:
        self.deadline = deadline
        self.sock = socket.create_connection((host, port), timeout=max(deadline - time.monotonic(), 0.01))
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def call(self, request: Any, response_cls: type) -> Any:
        self.correlation_id += 1
        buffer = io.BytesIO()
        entity_writer(RequestHeader)(buffer, RequestHeader(
            request_api_key=request.__api_key__, request_api_version=request.__version__,
            correlation_id=i32(self.correlation_id), client_id="tidemark-groups"))
        entity_writer(type(request))(buffer, request)
        payload = buffer.getvalue()
        self._settimeout()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._read(4))[0]
        frame = self._read(size)
        header, offset = entity_reader(response_cls.__header_schema__)(frame, 0)
        if header.correlation_id != self.correlation_id:
            raise ConnectionError("response out of order")
        body, _ = entity_reader(response_cls)(frame, offset)
        return body

    def _settimeout(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.sock.settimeout(remaining)

    def _read(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            self._settimeout()
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


def _offset_delete(cluster: Cluster, group: str, partitions: Sequence[tuple[str, int]]
                   ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
    """Ask the group's coordinator to delete the offsets; the top-level and per-partition errors."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = OffsetDeleteRequest(group_id=group, topics=tuple(
        OffsetDeleteRequestTopic(name=topic, partitions=tuple(OffsetDeleteRequestPartition(partition_index=i32(p))
                                                              for p in ps))
        for topic, ps in by_topic.items()))
    deadline = time.monotonic() + cluster.timeout_s
    last = "no answer"
    while True:
        try:
            bootstrap = _connect_any(cluster.bootstrap, deadline)
            try:
                found = bootstrap.call(FindCoordinatorRequest(key=group, key_type=i8(0)), FindCoordinatorResponse)
            finally:
                bootstrap.close()
            if found.error_code == ErrorCode.none:
                coordinator = _Connection(found.host, int(found.port), deadline)
                try:
                    response = coordinator.call(request, OffsetDeleteResponse)
                finally:
                    coordinator.close()
                if response.error_code not in _RETRIABLE_COORDINATOR_ERRORS:
                    results = {(topic.name, int(p.partition_index)): p.error_code
                               for topic in response.topics for p in topic.partitions}
                    return response.error_code, results
                last = _error_name(response.error_code)
            elif found.error_code in _RETRIABLE_COORDINATOR_ERRORS:
                last = _error_name(found.error_code)
            else:
                raise GroupsError(f"Error: finding the coordinator of group '{group}' failed against "
                                  f"{cluster.bootstrap}: {_error_name(found.error_code)}")
        except (TimeoutError, socket.timeout):
            raise GroupsError(f"Error: deleting offsets of group '{group}' timed out after {cluster.timeout_s:g}s "
                              f"against {cluster.bootstrap}") from None
        except (OSError, ConnectionError) as exc:
            last = exc.strerror or str(exc) if isinstance(exc, OSError) else str(exc)
        if time.monotonic() + 0.1 >= deadline:
            raise GroupsError(f"Error: deleting offsets of group '{group}' failed against {cluster.bootstrap}: {last}")
        time.sleep(0.1)


def _parse_topic_arg(value: str, option: str) -> tuple[str, list[int] | None]:
    """"TOPIC" (every partition) or "TOPIC:P,P,..."."""
    topic, sep, rest = value.partition(":")
    if not topic:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P,P,..., got {value!r}", param_hint=option)
    if not sep:
        return topic, None
    try:
        partitions = [int(part) for part in rest.split(",")]
    except ValueError:
        raise click.BadParameter(f"invalid partition list in {value!r}", param_hint=option) from None
    if any(p < 0 for p in partitions):
        raise click.BadParameter(f"invalid partition list in {value!r}", param_hint=option)
    return topic, partitions


@groups.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="Topic (all its partitions) or TOPIC:P,P to delete the group's offsets of; repeatable.")
@common_options
def delete_offsets_command(group: str, topics: tuple[str, ...], bootstrap: str, timeout_ms: int,
                           command_config: tuple[str, ...]) -> None:
    """Delete GROUP's committed offsets for some topics (OffsetDelete, KIP-496).

    The coordinator refuses (GROUP_SUBSCRIBED_TO_TOPIC) for topics the group's live members consume."""
    config = _parse_config(command_config)
    if config.get("security.protocol", "plaintext").lower() != "plaintext":
        raise GroupsError("Error: delete-offsets talks to the coordinator itself and supports PLAINTEXT listeners only")
    cluster = Cluster(bootstrap, timeout_ms, config)
    cluster.check_reachable()
    parsed = [_parse_topic_arg(value, "--topic") for value in topics]
    existing = cluster.topic_partitions() if any(ps is None for _t, ps in parsed) else {}
    wanted: list[tuple[str, int]] = []
    unknown_topics: list[str] = []
    for topic, partitions in parsed:
        if partitions is None:
            if topic in existing:
                wanted += [(topic, p) for p in existing[topic]]
            else:
                unknown_topics.append(topic)
        else:
            wanted += [(topic, p) for p in partitions]
    wanted = list(dict.fromkeys(wanted))

    # Asked even when every topic is unknown, as Kafka's tool does: a group that does not exist is
    # the error to report, not its topics.
    top_error, results = _offset_delete(cluster, group, wanted)
    rows: list[tuple[str, int | str, str]] = []
    for topic in unknown_topics:
        rows.append((topic, "Not Provided", "Error: UNKNOWN_TOPIC_OR_PARTITION"))
    partition_errors = bool(unknown_topics)
    if top_error == ErrorCode.none:
        for tp in wanted:
            # A partition the coordinator left out had no offset to delete (Kafka's broker answers
            # only those it had): Kafka's admin client counts it a success.
            code = results.get(tp, ErrorCode.none)
            partition_errors |= code != ErrorCode.none
            rows.append((tp[0], tp[1], "Successful" if code == ErrorCode.none else f"Error: {_error_name(code)}"))
    rows.sort(key=lambda row: (row[0], row[1] if isinstance(row[1], int) else -1))

    if top_error == ErrorCode.group_id_not_found:
        raise GroupsError(f"Consumer group '{group}' does not exist.")
    if top_error == ErrorCode.non_empty_group:
        raise GroupsError(f"Error: Deleting offsets of a consumer group '{group}' is forbidden "
                          f"if the group is not empty.")
    if top_error != ErrorCode.none:
        raise GroupsError(f"Error: deleting offsets of group '{group}' failed: {_error_name(top_error)}")
    if partition_errors:
        click.echo("Error: Encountered some partition level error(s), see the follow-up details:", err=True)
    else:
        click.echo(f"Request succeeded for deleting offsets with topic {', '.join(topics)} group {group}")
        click.echo()
    click.echo(format_table(["TOPIC", "PARTITION", "STATUS"], rows))
    if partition_errors:
        raise click.exceptions.Exit(1)


# -- reset-offsets ----------------------------------------------------------------------------

_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<days>[-+]?\d+)D)?"
    r"(?:T(?:(?P<hours>[-+]?\d+)H)?(?:(?P<minutes>[-+]?\d+)M)?(?:(?P<seconds>[-+]?\d+(?:[.,]\d{1,9})?)S)?)?",
    re.IGNORECASE)


def parse_duration(value: str) -> datetime.timedelta:
    """An ISO-8601 duration as java.time.Duration reads it: PnDTnHnMn.nS (days, hours, minutes, seconds)."""
    match = _DURATION.fullmatch(value.strip())
    parts = match.groupdict() if match else {}
    empty = not any(parts.get(k) for k in ("days", "hours", "minutes", "seconds"))
    if not match or empty or value.strip().upper().endswith("T"):
        raise click.BadParameter(f"expected an ISO-8601 duration like P1DT2H30M or PT15M, got {value!r}",
                                 param_hint="--by-duration")
    duration = datetime.timedelta(days=int(parts["days"] or 0), hours=int(parts["hours"] or 0),
                                  minutes=int(parts["minutes"] or 0),
                                  seconds=float((parts["seconds"] or "0").replace(",", ".")))
    return -duration if parts["sign"] == "-" else duration


def parse_datetime(value: str) -> int:
    """ISO-8601 date-time (2026-11-22T10:00:00.000, optionally +01:00 or Z) to epoch milliseconds; naive is UTC."""
    try:
        moment = datetime.datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(f"expected an ISO-8601 date-time like 2026-11-22T10:00:00.000[+01:00], got {value!r}",
                                 param_hint="--to-datetime") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return _epoch_ms(moment)


def _epoch_ms(moment: datetime.datetime) -> int:
    return (moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) // datetime.timedelta(milliseconds=1)


def parse_plan(text: str, group: str) -> dict[tuple[str, int], int]:
    """A reset plan as --export writes it: TOPIC,PARTITION,OFFSET lines (GROUP,TOPIC,PARTITION,OFFSET lines
    are accepted too; only those of `group` are kept)."""
    plan: dict[tuple[str, int], int] = {}
    for number, fields in enumerate(csv.reader(io.StringIO(text)), start=1):
        fields = [field.strip() for field in fields]
        if not fields or fields == [""]:
            continue
        if len(fields) == 4:
            if fields[0] != group:
                continue
            fields = fields[1:]
        try:
            if len(fields) != 3:
                raise ValueError
            topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
            if not topic or partition < 0:
                raise ValueError
        except ValueError:
            raise GroupsError(f"Error: line {number} of the reset plan is not TOPIC,PARTITION,OFFSET: "
                              f"{','.join(fields)!r}") from None
        plan[(topic, partition)] = offset
    return plan


def plan_csv(plan: dict[tuple[str, int], int]) -> str:
    return "".join(f"{topic},{partition},{offset}\n" for (topic, partition), offset in sorted(plan.items()))


def _resolve_scope(cluster: Cluster, topic_args: Sequence[str], explicit: Iterable[tuple[str, int]] = ()
                   ) -> list[tuple[str, int]]:
    """--topic arguments (and partitions named elsewhere) as partitions, each checked to exist."""
    existing = cluster.topic_partitions()
    wanted: list[tuple[str, int]] = list(explicit)
    for value in topic_args:
        topic, partitions = _parse_topic_arg(value, "--topic")
        if topic not in existing:
            raise GroupsError(f"Error: topic '{topic}' does not exist.")
        wanted += [(topic, p) for p in (existing[topic] if partitions is None else partitions)]
    missing = [f"{t}-{p}" for t, p in wanted if p not in existing.get(t, ())]
    if missing:
        raise GroupsError(f"Error: partition(s) {', '.join(dict.fromkeys(missing))} do not exist.")
    return sorted(set(wanted))


def _clamp(cluster: Cluster, requested: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Like kafka-consumer-groups: a target past the log end becomes the log end, one before the log start
    becomes the log start, each with a warning on stderr."""
    starts = cluster.offsets_for(requested, OffsetSpec.earliest(), "earliest")
    ends = cluster.offsets_for(requested, OffsetSpec.latest(), "latest")
    clamped: dict[tuple[str, int], int] = {}
    for tp, offset in requested.items():
        name = f"{tp[0]}-{tp[1]}"
        if offset > ends[tp]:
            click.echo(f"Warning: new offset ({offset}) is higher than the latest offset of {name}; "
                       f"using {ends[tp]}.", err=True)
            offset = ends[tp]
        elif offset < starts[tp]:
            click.echo(f"Warning: new offset ({offset}) is lower than the earliest offset of {name}; "
                       f"using {starts[tp]}.", err=True)
            offset = starts[tp]
        clamped[tp] = offset
    return clamped


def _by_timestamp(cluster: Cluster, partitions: Sequence[tuple[str, int]], timestamp_ms: int
                  ) -> dict[tuple[str, int], int]:
    """The first offset whose timestamp is >= timestamp_ms; the log end where no message is that recent."""
    found = cluster.offsets_for(partitions, OffsetSpec.for_timestamp(timestamp_ms), "by-timestamp")
    missing = [tp for tp, offset in found.items() if offset < 0]
    ends = cluster.offsets_for(missing, OffsetSpec.latest(), "latest")
    for tp in sorted(missing):
        click.echo(f"Warning: {tp[0]}-{tp[1]} has no message at or after the requested time; "
                   f"using its log end offset {ends[tp]}.", err=True)
        found[tp] = ends[tp]
    return found


_SCENARIOS = ("--to-earliest", "--to-latest", "--to-current", "--to-offset", "--shift-by", "--to-datetime",
              "--by-duration", "--from-file")


@groups.command("reset-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, metavar="TOPIC[:P,...]",
              help="Scope: a topic (all its partitions) or TOPIC:P,P; repeatable.")
@click.option("--all-topics", is_flag=True, help="Scope: every partition the group has a committed offset for.")
@click.option("--to-earliest", is_flag=True, help="Reset to the log start offset.")
@click.option("--to-latest", is_flag=True, help="Reset to the log end offset.")
@click.option("--to-current", is_flag=True,
              help="Reset to the committed offset (the log end where there is none).")
@click.option("--to-offset", type=int, metavar="N", help="Reset to offset N (clamped to the log).")
@click.option("--shift-by", type=int, metavar="N", help="Move the committed offset by N (clamped to the log).")
@click.option("--to-datetime", metavar="ISO8601",
              help="Reset to the first offset with a timestamp at or after this time "
                   "(e.g. 2026-11-22T10:00:00.000, optionally +01:00; without an offset it is UTC).")
@click.option("--by-duration", metavar="PnDTnHnM", help="Like --to-datetime with the time now minus this duration.")
@click.option("--from-file", type=click.File("r"), metavar="CSV",
              help="Reset to the offsets in a TOPIC,PARTITION,OFFSET file (as --export writes).")
@click.option("--dry-run", is_flag=True, help="Only show the plan (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets for the group.")
@click.option("--export", is_flag=True, help="Print the plan as TOPIC,PARTITION,OFFSET lines instead of a table.")
@common_options
def reset_offsets_command(group: str, topics: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
                          to_current: bool, to_offset: int | None, shift_by: int | None, to_datetime: str | None,
                          by_duration: str | None, from_file: Any, dry_run: bool, execute: bool, export: bool,
                          bootstrap: str,
                          timeout_ms: int, command_config: tuple[str, ...]) -> None:
    """Plan, and with --execute commit, new offsets for GROUP, which must have no active members.

    Give a scope (--topic ... or --all-topics; --from-file brings its own) and exactly one scenario."""
    chosen = [name for name, value in zip(_SCENARIOS, (to_earliest, to_latest, to_current, to_offset, shift_by,
                                                       to_datetime, by_duration, from_file))
              # `is`, not `in`: 0 == False, and --to-offset 0 / --shift-by 0 are real values.
              if value is not None and value is not False]
    if len(chosen) != 1:
        raise click.UsageError(f"give exactly one of {', '.join(_SCENARIOS)}"
                               + (f" (got {', '.join(chosen)})" if chosen else ""))
    if dry_run and execute:
        raise click.UsageError("--dry-run and --execute exclude each other")
    if from_file is not None:
        if topics or all_topics:
            raise click.UsageError("--from-file takes its partitions from the file; leave out --topic/--all-topics")
    elif bool(topics) == all_topics:
        raise click.UsageError("give the scope: --topic TOPIC[:P,...] (repeatable) or --all-topics")
    # Parse everything local before talking to the cluster: a typo fails at once.
    for value in topics:
        _parse_topic_arg(value, "--topic")
    timestamp_ms = None
    if to_datetime is not None:
        timestamp_ms = parse_datetime(to_datetime)
    elif by_duration is not None:
        timestamp_ms = _epoch_ms(datetime.datetime.now(datetime.timezone.utc) - parse_duration(by_duration))
    file_plan = parse_plan(from_file.read(), group) if from_file is not None else None

    cluster = Cluster(bootstrap, timeout_ms, _parse_config(command_config))
    cluster.check_reachable()
    state = cluster.group_state(group)
    if state not in ("Empty", "Dead"):
        raise GroupsError(f"Assignments can only be reset if the group '{group}' is inactive, "
                          f"but the current state is {state}.")

    committed = {tp: offset for tp, offset in cluster.committed(group).items() if offset is not None}
    if file_plan is not None:
        partitions = _resolve_scope(cluster, (), file_plan)
    elif all_topics:
        partitions = _resolve_scope(cluster, (), committed)
    else:
        partitions = _resolve_scope(cluster, topics)
    if not partitions:
        raise GroupsError(f"Error: nothing to reset: group '{group}' has no committed offsets"
                          if all_topics else "Error: nothing to reset: the plan is empty")

    plan: dict[tuple[str, int], int]
    if to_earliest:
        plan = cluster.offsets_for(partitions, OffsetSpec.earliest(), "earliest")
    elif to_latest:
        plan = cluster.offsets_for(partitions, OffsetSpec.latest(), "latest")
    elif to_current:
        ends = cluster.offsets_for([tp for tp in partitions if tp not in committed], OffsetSpec.latest(), "latest")
        plan = {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
    elif to_offset is not None:
        plan = _clamp(cluster, {tp: to_offset for tp in partitions})
    elif shift_by is not None:
        for tp in partitions:
            if tp not in committed:
                raise GroupsError(f"Error: Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                                  f"current committed offset")
        plan = _clamp(cluster, {tp: committed[tp] + shift_by for tp in partitions})
    elif timestamp_ms is not None:
        plan = _by_timestamp(cluster, partitions, timestamp_ms)
    else:
        assert file_plan is not None
        plan = _clamp(cluster, file_plan)

    if execute:
        cluster.alter_offsets(group, plan)
    if export:
        click.echo(plan_csv(plan), nl=False)
    else:
        rows = [[group, topic, partition, offset] for (topic, partition), offset in sorted(plan.items())]
        click.echo(format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not execute:
        # The plan alone looks exactly like what --execute prints; say that nothing changed.
        click.echo("Dry run: nothing was committed; add --execute to commit these offsets.", err=True)
