"""`tidemark groups describe`: offsets and lag per partition (records, seconds, Burrow's status),
members, or state of one group, several, or all (--all-groups), as kafka-consumer-groups.sh
--describe. Many groups cost one round of requests per broker, not one per group: DescribeGroups
and OffsetFetch batched per coordinator (client/groups.py), ListOffsets per leader, and one lag
probe over every group's partitions."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import click

from tidemark import lag as lag_math
from tidemark.cli.groups.common import TP, assignment_text, named_groups, notes
from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, echo_json, format_table, output_option
from tidemark.cli.zk_groups import ZookeeperGroup, read_zookeeper
from tidemark.client import lag_probe
from tidemark.client.admin import Admin
from tidemark.client.errors import ClientError
from tidemark.client.groups import CONSUMER, AdminGroupReader, GroupReader, GroupView
from tidemark.zk.offset_store import ZookeeperUnavailable

OFFSETS_HEADERS = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                   "CLIENT-ID", "LAG-SECONDS", "STATUS"]
MEMBERS_HEADERS = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
# A consumer group's (KIP-848) members also show their epoch and the assignment they move to.
CONSUMER_MEMBERS_HEADERS = [*MEMBERS_HEADERS, "MEMBER-EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT"]
STATE_HEADERS = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]


@click.command("describe")
@click.argument("group_args", metavar="[GROUP]...", nargs=-1)
@click.option("--group", "group_opts", multiple=True, metavar="GROUP", help="A group to describe; repeatable.")
@click.option("--all-groups", is_flag=True, help="Describe every group the cluster lists.")
@cluster_options
@click.option("--offsets", is_flag=True, help="Committed offsets and lag (the default view).")
@click.option("--members", is_flag=True, help="One row per member with its partition count (a consumer group's: "
                                                "with its epoch, current and target assignment).")
@click.option("--state", is_flag=True, help="Coordinator, assignment strategy, state and member count.")
@click.option("--verbose", is_flag=True, help="With --members: add each member's ASSIGNMENT.")
@output_option
@click.option("--zookeeper", "zookeeper", metavar="HOST:PORT[/chroot]",
              help="Also groups of ZooKeeper consumers: offsets from /consumers/[group]/offsets, owners (offsets view).")
def describe_command(group_args: tuple[str, ...], group_opts: tuple[str, ...], all_groups: bool, target: Target,
                     offsets: bool, members: bool, state: bool, verbose: bool, output: str,
                     zookeeper: str | None) -> None:
    """Describe groups: offsets and lag per partition (in records and seconds, with Burrow's status),
    their members, or their state."""
    if offsets + members + state > 1:
        raise click.UsageError("Option --describe takes at most one of these options: --offsets, --members, --state")
    view = "members" if members else "state" if state else "offsets"
    named = named_groups(group_args, group_opts, all_groups)
    if zookeeper and view != "offsets":
        raise click.UsageError("--zookeeper is for the offsets view")
    admin = target.admin("tidemark-groups")
    listed = [group for group, _state in admin.list_groups()] if all_groups or zookeeper else []
    zk_groups: dict[str, ZookeeperGroup] = {}
    if zookeeper:
        try:
            found = asyncio.run(read_zookeeper(zookeeper, [] if all_groups else named, target.timeout_s))
        except ZookeeperUnavailable as exc:
            raise CliError(f"Error: cannot read ZooKeeper {zookeeper}: {exc}") from exc
        zk_groups = {group.name: group for group in found}
    names = sorted(set(listed) | set(zk_groups)) if all_groups else named

    # Where each group's answer comes from: ZooKeeper, the cluster, or both.
    from_zookeeper: dict[str, ZookeeperGroup] = {}
    on_cluster: list[str] = []
    for group in names:
        in_zookeeper = zk_groups.get(group)
        cluster_too = in_zookeeper is None or group in listed
        if in_zookeeper and cluster_too and not in_zookeeper.members:
            # A cluster group without ZooKeeper consumers: its znode offsets are the broker's own
            # storage (offsets.storage=zookeeper), the same offsets the cluster view shows.
            in_zookeeper = None
        if in_zookeeper:
            from_zookeeper[group] = in_zookeeper
        if cluster_too:
            on_cluster.append(group)

    described = _describe(admin, target, on_cluster, view)
    failed = False
    as_json: list[dict[str, Any]] = []
    printed = 0
    for group in names:
        answer = described.get(group)
        if isinstance(answer, ClientError):
            if len(names) == 1:
                raise answer
            click.echo(str(answer), err=True)
            failed = True
            continue
        if output == "json":
            if group in from_zookeeper:
                as_json.append(_zookeeper_offsets(admin, from_zookeeper[group]))
            if answer is not None:
                as_json.append(answer)
            continue
        if printed and view != "state":
            click.echo()
        printed += 1
        if group in from_zookeeper:
            _print_zookeeper(admin, from_zookeeper[group])
            if answer is not None:
                click.echo()
        if answer is not None:
            _print(answer, view, verbose)
    if output == "json":
        echo_json(as_json)
    if failed:
        raise click.exceptions.Exit(1)


def _reader(admin: Admin, target: Target) -> GroupReader | AdminGroupReader:
    return GroupReader(target.bootstrap, target.timeout_s) if admin.plaintext else AdminGroupReader(admin)


def _timed_out(target: Target, exc: BaseException) -> ClientError:
    if isinstance(exc, (TimeoutError, socket.timeout)):
        return ClientError(f"Error: describing groups failed against {target.bootstrap}: "
                           f"Timed out (no answer within {target.timeout_s:g}s)")
    return ClientError(f"Error: describing groups failed against {target.bootstrap}: {exc}")


def _describe(admin: Admin, target: Target, groups: Sequence[str], view: str) -> dict[str, dict[str, Any] | ClientError]:
    """Each group's view as a JSON-ready dict, or its error."""
    if not groups:
        return {}
    try:
        with _reader(admin, target) as reader:
            views = reader.describe(groups)
            if view != "offsets":
                return {group: v if isinstance(v, ClientError) else (_members_dict(v) if view == "members"
                                                                     else _state_dict(v))
                        for group, v in views.items()}
            alive = [group for group, v in views.items() if not isinstance(v, ClientError)]
            committed = reader.committed(alive)
            ok = {group: (views[group], c) for group, c in committed.items() if not isinstance(c, ClientError)}
            offsets = _offsets(admin, target, reader, ok)
    except (OSError, ConnectionError) as exc:
        error = _timed_out(target, exc)
        return {group: error for group in groups}
    answers: dict[str, dict[str, Any] | ClientError] = {}
    for group in groups:
        v = views[group]
        answers[group] = v if isinstance(v, ClientError) else committed[group] if isinstance(
            committed[group], ClientError) else offsets[group]
    return answers


def _partitions_json(partitions: Sequence[TP] | None) -> list[dict[str, Any]] | None:
    return None if partitions is None else [{"topic": t, "partition": p} for t, p in partitions]


def _members_dict(v: GroupView) -> dict[str, Any]:
    """partitions: the current assignment; member_epoch and target_partitions: a consumer group's
    members only (null for a classic group's)."""
    return {"group": v.group, "type": v.group_type, "state": v.state, "members": [
        {"consumer_id": m.consumer_id, "host": m.host, "client_id": m.client_id,
         "partitions": _partitions_json(m.partitions), "member_epoch": m.member_epoch,
         "target_partitions": _partitions_json(m.target)} for m in v.members]}


def _state_dict(v: GroupView) -> dict[str, Any]:
    node_id, host, port = v.coordinator
    return {"group": v.group, "type": v.group_type, "coordinator": {"id": node_id, "host": host, "port": port},
            "assignment_strategy": v.assignor or None, "state": v.state, "members": len(v.members)}


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else round(ms / 1000, 3)


def _offsets(admin: Admin, target: Target, reader: GroupReader | AdminGroupReader,
             groups: Mapping[str, tuple[GroupView, dict[TP, int | None]]]) -> dict[str, dict[str, Any]]:
    """The offsets view of many groups: one ListOffsets per leader, one lag probe for all."""
    owners: dict[str, dict[TP, Any]] = {group: {tp: m for m in v.members for tp in m.partitions}
                                         for group, (v, _c) in groups.items()}
    partitions = {group: sorted(set(committed) | set(owners[group])) for group, (_v, committed) in groups.items()}
    ends = admin.log_end_offsets({tp for tps in partitions.values() for tp in tps})
    deadline = time.monotonic() + target.timeout_s
    known = {(group, *tp): offset for group, (_v, committed) in groups.items()
             for tp, offset in committed.items() if offset is not None}
    consumer = lag_probe.probe_consumer(target.bootstrap, target.timeout_ms, target.config)
    try:
        stamps = lag_probe.first_unconsumed_timestamps(consumer, known, ends, deadline)
        histories = lag_probe.commit_histories(consumer, list(groups), deadline)
        flat = {(group, *tp): h for group, by_tp in histories.items() for tp, h in by_tp.items()}
        if isinstance(reader, GroupReader):
            ends_at = reader.brokers.offsets_by_time
        else:
            def ends_at(asks):
                return lag_probe.ends_at_with_consumer(consumer, asks, deadline)
        windows = lag_probe.lag_windows(flat, ends, ends_at)
    finally:
        consumer.close()
    now_ms = int(time.time() * 1000)
    described = {}
    for group, (view, committed) in groups.items():
        rows = []
        for tp in partitions[group]:
            current, end = committed.get(tp), ends.get(tp)
            lag = lag_math.records_lag(current, end)
            window = windows.get((group, *tp), [])
            m = owners[group].get(tp)
            rows.append({
                "topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end, "lag": lag,
                "lag_seconds": _seconds(lag_math.time_lag_ms(now_ms, lag, stamps.get((group, *tp)))),
                "last_commit_age_seconds": _seconds(now_ms - window[-1].timestamp_ms) if window else None,
                "status": lag_math.partition_status(window, lag, now_ms) if lag is not None else None,
                "consumer_id": m.consumer_id if m else None, "host": m.host if m else None,
                "client_id": m.client_id if m else None,
            })
        status = lag_math.group_status(row["status"] for row in rows if row["status"] is not None)
        described[group] = {"group": group, "state": view.state, "status": status,
                            "members": [m.consumer_id for m in view.members], "partitions": rows}
    return described


def _zookeeper_offsets(admin: Admin, group: ZookeeperGroup) -> dict[str, Any]:
    """The offsets view of a ZooKeeper consumers' group: its znode offsets, the owner thread of
    each partition, and the lag against the log end."""
    partitions = sorted(set(group.offsets) | set(group.owners))
    ends = admin.log_end_offsets(partitions)
    rows = []
    for tp in partitions:
        current, end = group.offsets.get(tp), ends.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "current_offset": current, "log_end_offset": end,
                     "lag": lag_math.records_lag(current, end), "lag_seconds": None, "last_commit_age_seconds": None,
                     "status": None, "consumer_id": group.owners.get(tp), "host": None, "client_id": None})
    return {"group": group.name, "storage": "zookeeper", "state": "Stable" if group.members else "Empty",
            "members": group.members, "partitions": rows}


def _print_zookeeper(admin: Admin, group: ZookeeperGroup) -> None:
    described = _zookeeper_offsets(admin, group)
    click.echo(f"Consumer group '{group.name}': offsets in ZooKeeper, {len(group.members)} live consumer(s).")
    click.echo()
    click.echo(format_table(OFFSETS_HEADERS, [
        [group.name, row["topic"], row["partition"], row["current_offset"], row["log_end_offset"], row["lag"],
         row["consumer_id"], None, None, None, None] for row in described["partitions"]]))


def _print(described: dict[str, Any], view: str, verbose: bool) -> None:
    group = described["group"]
    if view == "offsets":
        notes(group, described["state"], described["members"])
        click.echo(format_table(OFFSETS_HEADERS, [
            [group, row["topic"], row["partition"], row["current_offset"], row["log_end_offset"], row["lag"],
             row["consumer_id"], row["host"], row["client_id"],
             None if row["lag_seconds"] is None else f"{row['lag_seconds']:.3f}", row["status"]]
            for row in described["partitions"]]))
    elif view == "state":
        c = described["coordinator"]
        coordinator = f"{c['host']}:{c['port']} ({c['id']})" if c["id"] >= 0 else None
        click.echo(format_table(STATE_HEADERS, [[group, coordinator, described["assignment_strategy"],
                                                 described["state"], described["members"]]]))
    else:
        notes(group, described["state"], described["members"])
        consumer = described["type"] == CONSUMER
        headers = CONSUMER_MEMBERS_HEADERS if consumer else MEMBERS_HEADERS + (["ASSIGNMENT"] if verbose else [])
        rows = []
        for m in described["members"]:
            partitions = [(p["topic"], p["partition"]) for p in m["partitions"]]
            row: list[object] = [group, m["consumer_id"], m["host"], m["client_id"], len(partitions)]
            if consumer:
                target = [(p["topic"], p["partition"]) for p in m["target_partitions"] or ()]
                row += [m["member_epoch"], assignment_text(partitions), assignment_text(target)]
            elif verbose:
                row.append(assignment_text(partitions))
            rows.append(row)
        click.echo(format_table(headers, rows))
