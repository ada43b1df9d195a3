"""`tidemark topics`: list, describe, create, alter and delete topics of any Kafka cluster, as
kafka-topics.sh does (its output lines, its error text), through the AdminClient:

    tidemark topics list [--topic REGEX] [--exclude-internal]
    tidemark topics describe [--topic REGEX] [--under-replicated-partitions | --unavailable-partitions]
    tidemark topics create --topic T [--partitions N] [--replication-factor R | --replica-assignment A]
                           [--config K=V]... [--if-not-exists]
    tidemark topics alter --topic REGEX --partitions N [--replica-assignment A] [--if-exists]
    tidemark topics delete --topic REGEX [--if-exists]

--topic is a regular expression matched against whole names, as in Kafka's tool.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic

from tidemark.cli.options import Target, cluster_options, parse_client_config
from tidemark.cli.output import CliError, CommandGroup, echo_json, output_option
from tidemark.client.admin import Admin, describe_error


class TopicCommandError(CliError):
    """Kafka's tool wraps every failure in this one prefix."""

    def __init__(self, message: str) -> None:
        super().__init__(f"Error while executing topic command : {message}")


@click.group("topics", cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
def topics() -> None:
    """List, describe, create, alter and delete topics (like kafka-topics.sh)."""


def _matching(admin: Admin, pattern: str | None, exclude_internal: bool = False) -> dict[str, Any]:
    """Topic name -> its metadata, for the topics whose whole name matches `pattern`."""
    try:
        regex = re.compile(pattern) if pattern is not None else None
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="--topic") from None
    metadata = admin.metadata().topics
    found = {name: topic for name, topic in metadata.items()
             if topic.error is None and (regex is None or regex.fullmatch(name))}
    if exclude_internal:
        found = {name: topic for name, topic in found.items() if not name.startswith("__")}
    return dict(sorted(found.items()))


def _require(found: dict[str, Any], pattern: str, if_exists: bool) -> None:
    if not found and not if_exists:
        raise TopicCommandError(f"Topic '{pattern}' does not exist as expected")


def _wait_all(admin: Admin, futures: dict[str, Any], what: str) -> None:
    for name, future in futures.items():
        try:
            future.result(timeout=admin.timeout_s + 1.0)
        except KafkaException as exc:
            raise TopicCommandError(describe_error(exc)) from exc
        except TimeoutError as exc:
            raise CliError(f"Error: {what} '{name}' timed out after {admin.timeout_s:g}s against "
                           f"{admin.bootstrap}") from exc


@topics.command("list")
@cluster_options
@click.option("--topic", "pattern", metavar="REGEX", help="Only topics whose name matches.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics (__consumer_offsets).")
@output_option
def list_command(target: Target, pattern: str | None, exclude_internal: bool, output: str) -> None:
    """Topic names, one per line."""
    names = list(_matching(target.admin("tidemark-topics"), pattern, exclude_internal))
    if output == "json":
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


def _configs(admin: Admin, names: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
    """Each topic's configs set on the topic itself (what Kafka's describe shows as Configs)."""
    if not names:
        return {}
    futures = admin.admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name) for name in names],
                                           request_timeout=admin.timeout_s)
    found: dict[str, list[tuple[str, str]]] = {}
    for resource, future in futures.items():
        entries = admin.wait(future, f"describing the configs of topic '{resource.name}'")
        found[resource.name] = sorted((e.name, e.value) for e in entries.values()
                                      if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and e.value is not None)
    return found


@topics.command("describe")
@cluster_options
@click.option("--topic", "pattern", metavar="REGEX", help="Only topics whose name matches.")
@click.option("--exclude-internal", is_flag=True, help="Leave out internal topics.")
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True,
              help="Only partitions whose ISR is smaller than their replicas.")
@click.option("--unavailable-partitions", "unavailable", is_flag=True,
              help="Only partitions whose leader is not available.")
@click.option("--if-exists", is_flag=True, help="No error when no topic matches.")
@output_option
def describe_command(target: Target, pattern: str | None, exclude_internal: bool, under_replicated: bool,
                     unavailable: bool, if_exists: bool, output: str) -> None:
    """Partitions, leaders, replicas and ISR of topics, and the configs set on them."""
    admin = target.admin("tidemark-topics")
    found = _matching(admin, pattern, exclude_internal)
    if pattern is not None:
        _require(found, pattern, if_exists)
    live = {b.id for b in admin.metadata().brokers.values()}
    filtered = under_replicated or unavailable
    configs = {} if filtered else _configs(admin, list(found))
    ids = _topic_ids(admin, list(found)) if not filtered else {}
    described = []
    for name, topic in found.items():
        partitions = []
        for p in sorted(topic.partitions.values(), key=lambda p: p.id):
            row = {"partition": p.id, "leader": p.leader if p.leader >= 0 else None, "replicas": list(p.replicas),
                   "isr": list(p.isrs)}
            if under_replicated and not len(p.isrs) < len(p.replicas):
                continue
            if unavailable and p.leader >= 0 and p.leader in live:
                continue
            partitions.append(row)
        replication = len(next(iter(topic.partitions.values())).replicas) if topic.partitions else 0
        described.append({"topic": name, "topic_id": ids.get(name), "partition_count": len(topic.partitions),
                          "replication_factor": replication, "configs": dict(configs.get(name, [])),
                          "partitions": partitions})
    if output == "json":
        echo_json(described)
        return
    for topic in described:
        if not filtered:
            configs_text = ",".join(f"{k}={v}" for k, v in topic["configs"].items())
            click.echo(f"Topic: {topic['topic']}\tTopicId: {topic['topic_id'] or ''}\t"
                       f"PartitionCount: {topic['partition_count']}\tReplicationFactor: {topic['replication_factor']}\t"
                       f"Configs: {configs_text}")
        for p in topic["partitions"]:
            leader = "none" if p["leader"] is None else p["leader"]
            click.echo(f"\tTopic: {topic['topic']}\tPartition: {p['partition']}\tLeader: {leader}\t"
                       f"Replicas: {','.join(map(str, p['replicas']))}\tIsr: {','.join(map(str, p['isr']))}")


def _topic_ids(admin: Admin, names: Sequence[str]) -> dict[str, str]:
    if not names:
        return {}
    from confluent_kafka import TopicCollection

    try:
        futures = admin.admin.describe_topics(TopicCollection(list(names)), request_timeout=admin.timeout_s)
        return {name: str(future.result(timeout=admin.timeout_s + 1.0).topic_id) for name, future in futures.items()}
    except (KafkaException, TimeoutError):
        return {}  # an older broker without topic ids: the column stays empty


def parse_replica_assignment(text: str) -> list[list[int]]:
    """"0:1,1:2" -> [[0, 1], [1, 2]]: per partition, its replicas' broker ids."""
    try:
        assignment = [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise click.BadParameter(f"expected BROKER:BROKER,... per partition, got {text!r}",
                                 param_hint="--replica-assignment") from None
    for replicas in assignment:
        if len(set(replicas)) != len(replicas):
            raise click.BadParameter(f"Partition replica lists may not contain duplicate entries: {text}",
                                     param_hint="--replica-assignment")
    return assignment


@topics.command("create")
@cluster_options
@click.option("--topic", "name", required=True, metavar="TOPIC")
@click.option("--partitions", type=click.IntRange(min=1), help="Partition count (default: the broker's num.partitions).")
@click.option("--replication-factor", type=click.IntRange(min=1),
              help="Replicas per partition (default: the broker's default.replication.factor).")
@click.option("--replica-assignment", metavar="B:B,B:B", help="Replicas of each partition, partitions comma separated.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config; repeatable.")
@click.option("--if-not-exists", is_flag=True, help="No error when the topic exists.")
def create_command(target: Target, name: str, partitions: int | None, replication_factor: int | None,
                   replica_assignment: str | None, configs: tuple[str, ...], if_not_exists: bool) -> None:
    """Create a topic."""
    config = parse_client_config(configs, "--config")
    kwargs: dict[str, Any] = {"config": config}
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            raise click.UsageError("--replica-assignment replaces --partitions and --replication-factor")
        kwargs["replica_assignment"] = parse_replica_assignment(replica_assignment)
        kwargs["num_partitions"] = len(kwargs["replica_assignment"])
    else:
        kwargs["num_partitions"] = -1 if partitions is None else partitions
        kwargs["replication_factor"] = -1 if replication_factor is None else replication_factor
    admin = target.admin("tidemark-topics")
    if if_not_exists and name in admin.metadata().topics:
        return
    futures = admin.admin.create_topics([NewTopic(name, **kwargs)], request_timeout=admin.timeout_s)
    try:
        _wait_all(admin, futures, "creating topic")
    except TopicCommandError:
        if if_not_exists and name in admin.metadata().topics:
            return  # created meanwhile by someone else
        raise
    click.echo(f"Created topic {name}.")


@topics.command("alter")
@cluster_options
@click.option("--topic", "pattern", required=True, metavar="REGEX")
@click.option("--partitions", type=click.IntRange(min=1), required=True, help="The new, larger partition count.")
@click.option("--replica-assignment", metavar="B:B,B:B",
              help="Replicas of the new partitions (after the existing ones), comma separated.")
@click.option("--if-exists", is_flag=True, help="No error when no topic matches.")
def alter_command(target: Target, pattern: str, partitions: int, replica_assignment: str | None,
                  if_exists: bool) -> None:
    """Add partitions to topics (CreatePartitions)."""
    admin = target.admin("tidemark-topics")
    found = _matching(admin, pattern)
    _require(found, pattern, if_exists)
    assignment = parse_replica_assignment(replica_assignment) if replica_assignment else None
    requests = []
    for name, topic in found.items():
        if assignment is not None:
            new = assignment[len(topic.partitions):] if len(assignment) == partitions else assignment
            requests.append(NewPartitions(name, partitions, new))
        else:
            requests.append(NewPartitions(name, partitions))
    if requests:
        _wait_all(admin, admin.admin.create_partitions(requests, request_timeout=admin.timeout_s),
                  "adding partitions to topic")


@topics.command("delete")
@cluster_options
@click.option("--topic", "pattern", required=True, metavar="REGEX")
@click.option("--if-exists", is_flag=True, help="No error when no topic matches.")
def delete_command(target: Target, pattern: str, if_exists: bool) -> None:
    """Delete topics."""
    admin = target.admin("tidemark-topics")
    found = _matching(admin, pattern)
    _require(found, pattern, if_exists)
    internal = [name for name in found if name.startswith("__")]
    if internal:
        raise TopicCommandError(f"Topic {internal[0]} is a kafka internal topic and is not allowed to be marked "
                                f"for deletion.")
    if found:
        _wait_all(admin, admin.admin.delete_topics(list(found), request_timeout=admin.timeout_s), "deleting topic")
