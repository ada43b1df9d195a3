"""What several `tidemark groups` subcommands share: members as rows, partition arguments."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import click
from confluent_kafka.admin import ConsumerGroupDescription

from tidemark.cli.output import UNKNOWN

TP = tuple[str, int]

# Kafka's classic group states, in the order its tools list them.
GROUP_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty")
# ListGroups v5's group types: classic groups, and KIP-848's (group.protocol=consumer).
GROUP_TYPES = ("classic", "consumer")


@dataclass(frozen=True)
class Member:
    consumer_id: str
    host: str
    client_id: str
    partitions: tuple[TP, ...]


def members_of(description: ConsumerGroupDescription) -> list[Member]:
    members = []
    for m in description.members:
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        members.append(Member(m.member_id, m.host, m.client_id, tuple(sorted((tp.topic, tp.partition) for tp in tps))))
    return sorted(members, key=lambda member: (-len(member.partitions), member.consumer_id))


def assignment_text(partitions: Sequence[TP]) -> str:
    if not partitions:
        return UNKNOWN
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{topic}({','.join(map(str, sorted(ps)))})" for topic, ps in sorted(by_topic.items()))


def notes(group: str, state: str, members: Sequence[object]) -> None:
    """Kafka's lines before a group's table: rebalancing (stderr) or no active members."""
    if state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        click.echo(f"Warning: Consumer group '{group}' is rebalancing.", err=True)
    elif not members:
        click.echo(f"Consumer group '{group}' has no active members.")
        click.echo()


def quoted(names: Iterable[str]) -> str:
    return ", ".join(f"'{name}'" for name in names)


def parse_topic_arg(value: str, option: str) -> tuple[str, list[int] | None]:
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


def named_groups(group_args: Sequence[str], group_opts: Sequence[str], all_groups: bool) -> list[str]:
    """GROUP arguments and --group options, or none with --all-groups (exactly one of them)."""
    named = list(dict.fromkeys([*group_args, *group_opts]))
    if bool(named) == all_groups:
        raise click.UsageError("give the groups (GROUP... or --group G, repeatable) or --all-groups")
    return named
