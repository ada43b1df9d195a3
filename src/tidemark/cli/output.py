"""What every cluster command prints: Kafka tools' plain space-aligned columns ("-" for an
unknown value, no colours, so output can be grepped and cut) or JSON, and errors as one line on
stderr with exit code 1."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import click

from tidemark.client.errors import ClientError

UNKNOWN = "-"


class CliError(click.ClickException):
    """A one-line error on stderr and exit code 1."""

    def show(self, file: Any = None) -> None:
        click.echo(self.format_message(), err=True)


class CommandGroup(click.Group):
    """A command group whose commands' client errors end the command as CliErrors."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ClientError as exc:
            raise CliError(str(exc)) from exc


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns, two spaces apart, no trailing blanks: easy to grep and cut."""
    cells = [list(headers)] + [[UNKNOWN if value is None else str(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in cells)


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


output_option = click.option("--output", "output", type=click.Choice(["table", "json"]), default="table",
                             show_default=True, help="json: the same answer as JSON, for scripts.")
