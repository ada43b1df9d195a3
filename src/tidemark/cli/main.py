"""The `tidemark` command: thin wrappers that parse arguments, call the layers, print."""

from __future__ import annotations

import click

from tidemark.cli.cluster import cluster
from tidemark.cli.groups import groups
from tidemark.cli.offsets import offsets
from tidemark.cli.serve import serve
from tidemark.cli.spark import spark
from tidemark.cli.users import users
from tidemark.cli.zk import zk


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tidemark")
def main() -> None:
    """tidemark: a Kafka-protocol broker built around Kafka's consumer offset management."""


main.add_command(serve)
main.add_command(offsets)
main.add_command(groups)
main.add_command(spark)
main.add_command(zk)
main.add_command(cluster)
main.add_command(users)
