"""`tidemark leader-election`: ElectLeaders, as kafka-leader-election.sh does (its output lines):

    tidemark leader-election --election-type PREFERRED|UNCLEAN
                             (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)
"""

from __future__ import annotations

import json
from typing import Any

import click
from confluent_kafka import ElectionType, KafkaError, KafkaException, TopicPartition

from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError
from tidemark.client.admin import describe_error


def _partitions_file(text: str) -> list[tuple[str, int]]:
    """{"partitions": [{"topic": "t", "partition": 0}, ...]}, as Kafka's tool reads it."""
    try:
        data = json.loads(text)
        found = [(str(p["topic"]), int(p["partition"])) for p in data["partitions"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise click.BadParameter(f"expected {{\"partitions\": [{{\"topic\": T, \"partition\": P}}, ...]}}: {exc}",
                                 param_hint="--path-to-json-file") from None
    duplicates = sorted({tp for tp in found if found.count(tp) > 1})
    if duplicates:
        raise click.BadParameter(f"Replica election data contains duplicate partitions: "
                                 f"{', '.join(f'{t}-{p}' for t, p in duplicates)}", param_hint="--path-to-json-file")
    return found


@click.command("leader-election")
@cluster_options
@click.option("--election-type", type=click.Choice(["PREFERRED", "UNCLEAN"], case_sensitive=False), required=True,
              help="PREFERRED: the first replica, if in sync; UNCLEAN: any live replica when no in-sync one is.")
@click.option("--topic", metavar="TOPIC", help="With --partition: the one partition to elect a leader for.")
@click.option("--partition", type=click.IntRange(min=0), help="With --topic.")
@click.option("--all-topic-partitions", is_flag=True, help="Every partition of every topic.")
@click.option("--path-to-json-file", type=click.File("r"), metavar="FILE",
              help='{"partitions": [{"topic": "t", "partition": 0}, ...]}')
def leader_election(target: Target, election_type: str, topic: str | None, partition: int | None,
                    all_topic_partitions: bool, path_to_json_file: Any) -> None:
    """Elect partition leaders (ElectLeaders, KIP-460)."""
    given = [topic is not None or partition is not None, all_topic_partitions, path_to_json_file is not None]
    if sum(given) != 1:
        raise click.UsageError("give one of --topic/--partition, --all-topic-partitions, --path-to-json-file")
    if (topic is None) != (partition is None):
        raise click.UsageError("--topic and --partition go together")
    election_type = election_type.upper()
    wanted: list[TopicPartition] | None
    if all_topic_partitions:
        wanted = None
    elif path_to_json_file is not None:
        wanted = [TopicPartition(t, p) for t, p in _partitions_file(path_to_json_file.read())]
    else:
        wanted = [TopicPartition(topic, partition)]
    admin = target.admin("tidemark-leader-election")
    # No request_timeout: confluent-kafka 2.16 fails on any keyword argument of elect_leaders; the wait
    # below bounds the call instead.
    future = admin.admin.elect_leaders(ElectionType[election_type], wanted)
    try:
        results = future.result(timeout=admin.timeout_s + 1.0)
    except KafkaException as exc:
        raise CliError(f"Error: electing leaders failed against {admin.bootstrap}: {describe_error(exc)}") from exc
    except TimeoutError as exc:
        raise CliError(f"Error: electing leaders timed out after {admin.timeout_s:g}s against {admin.bootstrap}") from exc
    succeeded, noop, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic, item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if isinstance(error, KafkaException) and error.args:
            error = error.args[0]
        if error is None:
            succeeded.append(name)
        elif isinstance(error, KafkaError) and error.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, error))
    if succeeded:
        click.echo(f"Successfully completed leader election ({election_type}) for partitions {', '.join(succeeded)}")
    if noop:
        click.echo(f"Valid replica already elected for partitions {', '.join(noop)}")
    for name, error in failed:
        click.echo(f"Error completing leader election ({election_type}) for partition: {name}: "
                   f"{describe_error(error) if isinstance(error, KafkaError) else error}")
    if failed:
        raise CliError(f"Error: {len(failed)} replica(s) could not be elected")
