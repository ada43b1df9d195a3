"""`tidemark groups delete (GROUP... | --all-groups)`: DeleteGroups, as kafka-consumer-groups.sh --delete."""

from __future__ import annotations

import click

from tidemark.cli.groups.common import named_groups, quoted
from tidemark.cli.options import Target, cluster_options


@click.command("delete")
@click.argument("group_args", metavar="[GROUP]...", nargs=-1)
@click.option("--group", "group_opts", multiple=True, metavar="GROUP", help="A group to delete; repeatable.")
@click.option("--all-groups", is_flag=True, help="Delete every group the cluster lists.")
@cluster_options
def delete_command(group_args: tuple[str, ...], group_opts: tuple[str, ...], all_groups: bool,
                   target: Target) -> None:
    """Delete consumer groups and their committed offsets. A group with members is not deleted."""
    named = named_groups(group_args, group_opts, all_groups)
    admin = target.admin("tidemark-groups")
    if all_groups:
        named = [group for group, _state in admin.list_groups()]
        if not named:
            click.echo("No consumer groups to delete.")
            return
    outcome = admin.delete_groups(named)
    deleted = [group for group, error in outcome.items() if error is None]
    failed = {group: error for group, error in outcome.items() if error is not None}
    if not failed:
        click.echo(f"Deletion of requested consumer groups ({quoted(deleted)}) was successful.")
        return
    click.echo("Error: Deletion of some consumer groups failed:", err=True)
    for group, error in failed.items():
        click.echo(f"* Group '{group}' could not be deleted due to: {error}", err=True)
    if deleted:
        click.echo(f"These consumer groups were deleted successfully: {quoted(deleted)}")
    raise click.exceptions.Exit(1)
