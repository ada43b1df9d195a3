"""`tidemark groups delete-offsets GROUP --topic TOPIC[:P,...]`: OffsetDelete (KIP-496), which the
AdminClient cannot send, so over the client layer's own connection (PLAINTEXT listeners only)."""

from __future__ import annotations

import click
from kio.schema.errors import ErrorCode

from tidemark.cli.groups.common import TP, parse_topic_arg
from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, format_table
from tidemark.client.connection import error_name, offset_delete
from tidemark.client.errors import GroupNotFound


@click.command("delete-offsets")
@click.argument("group")
@click.option("--topic", "topics", multiple=True, required=True, metavar="TOPIC[:P,...]",
              help="Topic (all its partitions) or TOPIC:P,P to delete the group's offsets of; repeatable.")
@cluster_options
def delete_offsets_command(group: str, topics: tuple[str, ...], target: Target) -> None:
    """Delete GROUP's committed offsets for some topics (OffsetDelete, KIP-496).

    The coordinator refuses (GROUP_SUBSCRIBED_TO_TOPIC) for topics the group's live members consume."""
    admin = target.admin("tidemark-groups")
    if not admin.plaintext:
        raise CliError("Error: delete-offsets talks to the coordinator itself and supports PLAINTEXT listeners only")
    parsed = [parse_topic_arg(value, "--topic") for value in topics]
    existing = admin.topic_partitions() if any(ps is None for _t, ps in parsed) else {}
    wanted: list[TP] = []
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
    top_error, results = offset_delete(target.bootstrap, target.timeout_s, group, wanted)
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
            rows.append((tp[0], tp[1], "Successful" if code == ErrorCode.none else f"Error: {error_name(code)}"))
    rows.sort(key=lambda row: (row[0], row[1] if isinstance(row[1], int) else -1))

    if top_error == ErrorCode.group_id_not_found:
        raise GroupNotFound(group)
    if top_error == ErrorCode.non_empty_group:
        raise CliError(f"Error: Deleting offsets of a consumer group '{group}' is forbidden "
                       f"if the group is not empty.")
    if top_error != ErrorCode.none:
        raise CliError(f"Error: deleting offsets of group '{group}' failed: {error_name(top_error)}")
    if partition_errors:
        click.echo("Error: Encountered some partition level error(s), see the follow-up details:", err=True)
    else:
        click.echo(f"Request succeeded for deleting offsets with topic {', '.join(topics)} group {group}")
        click.echo()
    click.echo(format_table(["TOPIC", "PARTITION", "STATUS"], rows))
    if partition_errors:
        raise click.exceptions.Exit(1)
