"""`tidemark groups reset-offsets`: plan, and with --execute commit, new offsets for inactive
groups, as kafka-consumer-groups.sh --reset-offsets (one or several --group, or --all-groups)."""

from __future__ import annotations

import csv
import datetime
import io
import re
from collections.abc import Iterable, Sequence
from typing import Any

import click
from confluent_kafka.admin import OffsetSpec

from tidemark.cli.groups.common import TP, named_groups, parse_topic_arg
from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, format_table
from tidemark.client.admin import Admin

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


def parse_plan(text: str, group: str) -> dict[TP, int]:
    """A reset plan as --export writes it: TOPIC,PARTITION,OFFSET lines (GROUP,TOPIC,PARTITION,OFFSET lines
    are accepted too; only those of `group` are kept)."""
    plan: dict[TP, int] = {}
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
            raise CliError(f"Error: line {number} of the reset plan is not TOPIC,PARTITION,OFFSET: "
                              f"{','.join(fields)!r}") from None
        plan[(topic, partition)] = offset
    return plan


def plan_csv(plan: dict[TP, int]) -> str:
    return "".join(f"{topic},{partition},{offset}\n" for (topic, partition), offset in sorted(plan.items()))


def _resolve_scope(admin: Admin, topic_args: Sequence[str], explicit: Iterable[TP] = ()
                   ) -> list[TP]:
    """--topic arguments (and partitions named elsewhere) as partitions, each checked to exist."""
    existing = admin.topic_partitions()
    wanted: list[TP] = list(explicit)
    for value in topic_args:
        topic, partitions = parse_topic_arg(value, "--topic")
        if topic not in existing:
            raise CliError(f"Error: topic '{topic}' does not exist.")
        wanted += [(topic, p) for p in (existing[topic] if partitions is None else partitions)]
    missing = [f"{t}-{p}" for t, p in wanted if p not in existing.get(t, ())]
    if missing:
        raise CliError(f"Error: partition(s) {', '.join(dict.fromkeys(missing))} do not exist.")
    return sorted(set(wanted))


def _clamp(admin: Admin, requested: dict[TP, int]) -> dict[TP, int]:
    """Like kafka-consumer-groups: a target past the log end becomes the log end, one before the log start
    becomes the log start, each with a warning on stderr."""
    starts = admin.offsets_for(requested, OffsetSpec.earliest(), "earliest")
    ends = admin.offsets_for(requested, OffsetSpec.latest(), "latest")
    clamped: dict[TP, int] = {}
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


def _by_timestamp(admin: Admin, partitions: Sequence[TP], timestamp_ms: int
                  ) -> dict[TP, int]:
    """The first offset whose timestamp is >= timestamp_ms; the log end where no message is that recent."""
    found = admin.offsets_for(partitions, OffsetSpec.for_timestamp(timestamp_ms), "by-timestamp")
    missing = [tp for tp, offset in found.items() if offset < 0]
    ends = admin.offsets_for(missing, OffsetSpec.latest(), "latest")
    for tp in sorted(missing):
        click.echo(f"Warning: {tp[0]}-{tp[1]} has no message at or after the requested time; "
                   f"using its log end offset {ends[tp]}.", err=True)
        found[tp] = ends[tp]
    return found


_SCENARIOS = ("--to-earliest", "--to-latest", "--to-current", "--to-offset", "--shift-by", "--to-datetime",
              "--by-duration", "--from-file")


@click.command("reset-offsets")
@click.argument("group_args", metavar="[GROUP]...", nargs=-1)
@click.option("--group", "group_opts", multiple=True, metavar="GROUP", help="A group to reset; repeatable.")
@click.option("--all-groups", is_flag=True, help="Reset every group the cluster lists.")
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
              help="Reset to the offsets in a [GROUP,]TOPIC,PARTITION,OFFSET file (as --export writes).")
@click.option("--dry-run", is_flag=True, help="Only show the plan (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets for the group.")
@click.option("--export", is_flag=True, help="Print the plan as CSV lines instead of a table "
              "(TOPIC,PARTITION,OFFSET for one group, GROUP,TOPIC,PARTITION,OFFSET for several).")
@cluster_options
def reset_offsets_command(group_args: tuple[str, ...], group_opts: tuple[str, ...], all_groups: bool,
                          topics: tuple[str, ...], all_topics: bool, to_earliest: bool, to_latest: bool,
                          to_current: bool, to_offset: int | None, shift_by: int | None, to_datetime: str | None,
                          by_duration: str | None, from_file: Any, dry_run: bool, execute: bool, export: bool,
                          target: Target) -> None:
    """Plan, and with --execute commit, new offsets for groups, which must have no active members.

    Give a scope (--topic ... or --all-topics; --from-file brings its own) and exactly one scenario.
    A group with members is reported and left alone; the others are reset (exit code 1 then)."""
    named = named_groups(group_args, group_opts, all_groups)
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
        parse_topic_arg(value, "--topic")
    timestamp_ms = None
    if to_datetime is not None:
        timestamp_ms = parse_datetime(to_datetime)
    elif by_duration is not None:
        timestamp_ms = _epoch_ms(datetime.datetime.now(datetime.timezone.utc) - parse_duration(by_duration))
    file_text = from_file.read() if from_file is not None else None
    if file_text is not None:
        for group in named:
            parse_plan(file_text, group)

    admin = target.admin("tidemark-groups")
    if all_groups:
        named = [group for group, _state in admin.list_groups()]
    scenario = _Scenario(to_earliest, to_latest, to_current, to_offset, shift_by, timestamp_ms)
    plans: dict[str, dict[TP, int]] = {}
    refused = False
    for group in named:
        state = admin.group_state(group)
        if state not in ("Empty", "Dead"):
            message = (f"Assignments can only be reset if the group '{group}' is inactive, "
                       f"but the current state is {state}.")
            if len(named) == 1:
                raise CliError(message)
            click.echo(f"Error: {message}", err=True)
            refused = True
            continue
        file_plan = parse_plan(file_text, group) if file_text is not None else None
        plans[group] = _plan_group(admin, group, topics, all_topics, file_plan, scenario, several=len(named) > 1)

    if execute:
        for group, plan in plans.items():
            if plan:
                admin.alter_offsets(group, plan)
    if export:
        if len(named) == 1:
            click.echo(plan_csv(next(iter(plans.values()), {})), nl=False)
        else:
            click.echo("".join(f"{group},{line}" for group, plan in sorted(plans.items())
                               for line in plan_csv(plan).splitlines(keepends=True)), nl=False)
    else:
        rows = [[group, topic, partition, offset] for group, plan in sorted(plans.items())
                for (topic, partition), offset in sorted(plan.items())]
        click.echo(format_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows))
    if not execute:
        # The plan alone looks exactly like what --execute prints; say that nothing changed.
        click.echo("Dry run: nothing was committed; add --execute to commit these offsets.", err=True)
    if refused:
        raise click.exceptions.Exit(1)


class _Scenario:
    def __init__(self, to_earliest: bool, to_latest: bool, to_current: bool, to_offset: int | None,
                 shift_by: int | None, timestamp_ms: int | None) -> None:
        self.to_earliest, self.to_latest, self.to_current = to_earliest, to_latest, to_current
        self.to_offset, self.shift_by, self.timestamp_ms = to_offset, shift_by, timestamp_ms


def _plan_group(admin: Admin, group: str, topics: Sequence[str], all_topics: bool, file_plan: dict[TP, int] | None,
                scenario: _Scenario, several: bool) -> dict[TP, int]:
    """One group's new offsets; with several groups, one with nothing to reset gets an empty plan."""
    committed = {tp: offset for tp, offset in admin.committed(group).items() if offset is not None}
    if file_plan is not None:
        partitions = _resolve_scope(admin, (), file_plan)
    elif all_topics:
        partitions = _resolve_scope(admin, (), committed)
    else:
        partitions = _resolve_scope(admin, topics)
    if not partitions:
        if several:
            return {}
        raise CliError(f"Error: nothing to reset: group '{group}' has no committed offsets"
                       if all_topics else "Error: nothing to reset: the plan is empty")
    if scenario.to_earliest:
        return admin.offsets_for(partitions, OffsetSpec.earliest(), "earliest")
    if scenario.to_latest:
        return admin.offsets_for(partitions, OffsetSpec.latest(), "latest")
    if scenario.to_current:
        ends = admin.offsets_for([tp for tp in partitions if tp not in committed], OffsetSpec.latest(), "latest")
        return {tp: committed[tp] if tp in committed else ends[tp] for tp in partitions}
    if scenario.to_offset is not None:
        return _clamp(admin, {tp: scenario.to_offset for tp in partitions})
    if scenario.shift_by is not None:
        for tp in partitions:
            if tp not in committed:
                raise CliError(f"Error: Cannot shift offset for partition {tp[0]}-{tp[1]} since there is no "
                               f"current committed offset")
        return _clamp(admin, {tp: committed[tp] + scenario.shift_by for tp in partitions})
    if scenario.timestamp_ms is not None:
        return _by_timestamp(admin, partitions, scenario.timestamp_ms)
    assert file_plan is not None
    return _clamp(admin, file_plan)
