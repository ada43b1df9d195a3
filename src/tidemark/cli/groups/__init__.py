"""`tidemark groups`: list, describe, delete and reset consumer groups of any Kafka cluster, as
kafka-consumer-groups.sh does, one module per subcommand:

    tidemark groups list [--state [STATE,...]] [--type [classic,consumer]]
    tidemark groups describe (GROUP... | --all-groups) [--offsets | --members [--verbose] | --state]
                             (a KIP-848 consumer group's members: epochs, current and target assignment)
                             [--zookeeper HOST:PORT]   (groups of ZooKeeper consumers too)
    tidemark groups delete (GROUP... | --all-groups)
    tidemark groups delete-offsets GROUP --topic TOPIC[:P,...]
    tidemark groups reset-offsets (GROUP... | --all-groups) (--topic TOPIC[:P,...] | --all-topics) SCENARIO
                                  [--dry-run | --execute] [--export]

each with --bootstrap-server, --timeout MS, --command-config FILE and -X KEY=VALUE; the read
commands take --output json.
"""

from __future__ import annotations

import click

from tidemark.cli.groups.delete import delete_command
from tidemark.cli.groups.delete_offsets import delete_offsets_command
from tidemark.cli.groups.describe import describe_command
from tidemark.cli.groups.listing import list_command
from tidemark.cli.groups.reset_offsets import reset_offsets_command
from tidemark.cli.output import CommandGroup


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
def groups() -> None:
    """Inspect consumer groups of any Kafka cluster (like kafka-consumer-groups.sh)."""


for command in (list_command, describe_command, delete_command, delete_offsets_command, reset_offsets_command):
    groups.add_command(command)
