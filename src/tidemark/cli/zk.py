"""`tidemark zk`: ZooKeeper-stored consumer offsets (Kafka's storage before the offsets topic).

    tidemark zk migrate-offsets --zookeeper HOST:PORT --bootstrap-server HOST:PORT [--group G]... [--dry-run]

migrate-offsets copies each group's /consumers/[group]/offsets znodes into the cluster's offsets
topic with OffsetCommit (generation -1, as an admin commit), so the group's consumers resume
there once they use offsets.storage=kafka. A group is refused while it has live members (a
consumer registered under /consumers/[group]/ids, or a non-Empty group on the cluster). A group
the cluster already has offsets for is skipped whole: it ran with dual.commit.enabled (or was
migrated before), and its consumers resume from the larger of the two stores, which a copy
would only blur. The broker must keep offsets in its log (offsets.storage=kafka) for the
commits to land there.
"""

from __future__ import annotations

import asyncio

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, CommandGroup
from tidemark.client.admin import Admin
from tidemark.cli.zk_groups import ZookeeperGroup, read_zookeeper
from tidemark.zk.offset_store import ZookeeperUnavailable


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
def zk() -> None:
    """ZooKeeper-stored consumer offsets: move them to the offsets topic."""


@zk.command("migrate-offsets")
@click.option("--zookeeper", "zookeeper", required=True, metavar="HOST:PORT[/chroot]",
              help="The ZooKeeper the consumers stored their offsets in (zookeeper.connect).")
@click.option("--group", "group_names", multiple=True, metavar="GROUP",
              help="A group to migrate; repeatable. Default: every group under /consumers.")
@click.option("--dry-run", is_flag=True, help="Only show what would move.")
@cluster_options
def migrate_offsets_command(zookeeper: str, group_names: tuple[str, ...], dry_run: bool, target: Target) -> None:
    """Copy ZooKeeper-stored offsets of groups without live members into the offsets topic."""
    cluster = target.admin("tidemark-zk")
    try:
        zk_groups = asyncio.run(read_zookeeper(zookeeper, group_names, cluster.timeout_s))
    except ZookeeperUnavailable as exc:
        raise CliError(f"Error: cannot read ZooKeeper {zookeeper}: {exc}") from exc
    known = cluster.topic_partitions()
    table = Table("GROUP", "TOPIC", "PARTITION", "ZOOKEEPER-OFFSET", "RESULT",
                  title="dry run: nothing committed" if dry_run else None)
    refused: list[str] = []
    stderr = Console(stderr=True)
    with Progress(console=stderr, transient=True) as progress:
        task = progress.add_task("migrating groups", total=len(zk_groups))
        for group in zk_groups:
            reason = _refusal(cluster, group)
            if reason is not None:
                refused.append(group.name)
                table.add_row(group.name, "-", "-", "-", f"refused: {reason}")
                progress.advance(task)
                continue
            committed = {tp: o for tp, o in cluster.committed(group.name).items() if o is not None}
            if committed:
                table.add_row(group.name, "-", "-", "-",
                              f"skipped: the cluster has offsets for {len(committed)} partition(s) (dual commit)")
                progress.advance(task)
                continue
            plan: dict[tuple[str, int], int] = {}
            rows = []
            for (topic, partition), offset in sorted(group.offsets.items()):
                if partition not in known.get(topic, ()):
                    result = "skipped: unknown partition"
                else:
                    plan[topic, partition] = offset
                    result = "would move" if dry_run else "moved"
                rows.append((topic, partition, offset, result))
            if plan and not dry_run:
                cluster.alter_offsets(group.name, plan)
            for topic, partition, offset, result in rows:
                table.add_row(group.name, topic, str(partition), str(offset), result)
            progress.advance(task)
    Console(width=200).print(table)
    if refused:
        raise CliError(f"Error: {len(refused)} group(s) not migrated (live members): {', '.join(refused)}")


def _refusal(cluster: Admin, group: ZookeeperGroup) -> str | None:
    """Why a group may not be migrated now, or None."""
    if group.members:
        return f"live ZooKeeper consumers {', '.join(group.members)}"
    state = cluster.group_state(group.name)
    if state not in ("Empty", "Dead"):
        return f"group is {state} on the cluster"
    return None
