"""`tidemark groups list [--state [STATE,...]]`."""

from __future__ import annotations

import click

from tidemark.cli.groups.common import GROUP_STATES
from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, echo_json, format_table, output_option


def parse_states(value: str) -> set[str]:
    """A comma list of state names, any case, as Kafka's tool reads --state."""
    by_lower = {state.lower(): state for state in GROUP_STATES}
    states = {by_lower.get(part.strip().lower()) for part in value.split(",")}
    if None in states:
        raise CliError(f"Error: Invalid state list '{value}'. Valid states are: {', '.join(GROUP_STATES)}")
    return {state for state in states if state is not None}


@click.command("list")
@cluster_options
@click.option("--state", "state", is_flag=False, flag_value="", default=None, metavar="[STATE,...]",
              help="Add a STATE column; with states (Stable,Empty), list only groups in them.")
@output_option
def list_command(target: Target, state: str | None, output: str) -> None:
    """List consumer groups, one group id per line."""
    wanted = parse_states(state) if state else None
    listed = target.admin("tidemark-groups").list_groups()
    if wanted is not None:
        listed = [(group, group_state) for group, group_state in listed if group_state in wanted]
    if output == "json":
        echo_json([{"group": group, "state": group_state} for group, group_state in listed])
    elif state is not None:
        click.echo(format_table(["GROUP", "STATE"], listed))
    else:
        for group_id, _state in listed:
            click.echo(group_id)
