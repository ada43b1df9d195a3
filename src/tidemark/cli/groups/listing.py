"""`tidemark groups list [--state [STATE,...]] [--type [TYPE,...]]`."""

from __future__ import annotations

import click

from tidemark.cli.groups.common import GROUP_STATES, GROUP_TYPES
from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, echo_json, format_table, output_option


def parse_states(value: str) -> set[str]:
    """A comma list of state names, any case, as Kafka's tool reads --state."""
    by_lower = {state.lower(): state for state in GROUP_STATES}
    states = {by_lower.get(part.strip().lower()) for part in value.split(",")}
    if None in states:
        raise CliError(f"Error: Invalid state list '{value}'. Valid states are: {', '.join(GROUP_STATES)}")
    return {state for state in states if state is not None}


def parse_types(value: str) -> set[str]:
    """A comma list of group types, any case, as Kafka's tool reads --type."""
    types = {part.strip().lower() for part in value.split(",")}
    if not types <= set(GROUP_TYPES):
        raise CliError(f"Error: Invalid types list '{value}'. Valid types are: {', '.join(GROUP_TYPES)}")
    return types


@click.command("list")
@cluster_options
@click.option("--state", "state", is_flag=False, flag_value="", default=None, metavar="[STATE,...]",
              help="Add a STATE column; with states (Stable,Empty), list only groups in them.")
@click.option("--type", "group_type", is_flag=False, flag_value="", default=None, metavar="[TYPE,...]",
              help="Add a TYPE column (classic, consumer: KIP-848's protocol); with types, list only groups "
                   "of them.")
@output_option
def list_command(target: Target, state: str | None, group_type: str | None, output: str) -> None:
    """List consumer groups, one group id per line."""
    wanted = parse_states(state) if state else None
    wanted_types = parse_types(group_type) if group_type else None
    listed = target.admin("tidemark-groups").group_listings()
    if wanted is not None:
        listed = [g for g in listed if g[1] in wanted]
    if wanted_types is not None:
        listed = [g for g in listed if g[2] in wanted_types]
    if output == "json":
        echo_json([{"group": group, "state": group_state, **({"type": t} if group_type is not None else {})}
                   for group, group_state, t in listed])
    elif state is not None or group_type is not None:
        # Kafka's column order: GROUP, TYPE, STATE, each only when asked for.
        headers = ["GROUP", *(["TYPE"] if group_type is not None else []), *(["STATE"] if state is not None else [])]
        click.echo(format_table(headers, [
            [group, *([t] if group_type is not None else []), *([s] if state is not None else [])]
            for group, s, t in listed]))
    else:
        for group_id, _state, _type in listed:
            click.echo(group_id)
