"""The `tidemark` command: thin wrappers that parse arguments, call the layers, print."""

from __future__ import annotations

import click

from tidemark.cli.acls import acls
from tidemark.cli.cluster import cluster
from tidemark.cli.configs import configs
from tidemark.cli.groups import groups
from tidemark.cli.leader_election import leader_election
from tidemark.cli.offsets import offsets
from tidemark.cli.output import CommandGroup
from tidemark.cli.quotas import quotas
from tidemark.cli.serve import serve
from tidemark.cli.spark import spark
from tidemark.cli.transactions import transactions
from tidemark.cli.topics import topics
from tidemark.cli.users import users
from tidemark.cli.zk import zk

# Every command, in the order `tidemark --help` lists them; a new command is one import and one entry.
COMMANDS = (serve, offsets, groups, topics, configs, acls, users, quotas, leader_election, transactions, spark,
            zk, cluster)


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidemark")
def main() -> None:
    """tidemark: a Kafka-protocol broker built around Kafka's consumer offset management."""


for command in COMMANDS:
    main.add_command(command)
