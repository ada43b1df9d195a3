"""`tidemark users add|remove|list`: SCRAM users, offline on a broker's data directory or on a
cluster's ZooKeeper (as kafka-configs.sh --zookeeper and kafka-storage.sh --add-scram do), so
the first credentials exist before any broker asks for them. Passwords are read from a file and
never stored: only the salted, iterated SCRAM credential is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from tidemark.broker.security.scram_store import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialStore,
    FileCredentialStore,
    ZkCredentialStore,
    make_credential,
)

_where = [
    click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
                 help="A single broker's data directory."),
    click.option("--zookeeper", default=None, help="A cluster's zookeeper.connect (with its chroot)."),
]


def _store_options(function):  # type: ignore[no-untyped-def]
    for option in reversed(_where):
        function = option(function)
    return function


@contextmanager
def _store(data_dir: Path | None, zookeeper: str | None) -> Iterator[CredentialStore]:
    if (data_dir is None) == (zookeeper is None):
        raise click.UsageError("give exactly one of --data-dir and --zookeeper")
    if data_dir is not None:
        yield FileCredentialStore(data_dir)
        return
    from tidemark.cluster.zk.session import connect

    try:
        client = connect(zookeeper)
    except Exception as exc:  # noqa: BLE001 - one line, not a traceback
        raise click.ClickException(f"cannot reach ZooKeeper at {zookeeper}: {exc}") from None
    try:
        yield ZkCredentialStore(client)
    finally:
        client.stop()
        client.close()


@click.group()
def users() -> None:
    """SCRAM users (SASL/SCRAM-SHA-256 and -512; SASL/PLAIN checks passwords against them)."""


@users.command()
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(SCRAM_MECHANISMS),
              default=("SCRAM-SHA-512",), show_default=True, help="Repeatable.")
@click.option("--password-file", type=click.File("r"), required=True, help="The password (its first line); - for stdin.")
@click.option("--iterations", type=click.IntRange(MIN_ITERATIONS, MAX_ITERATIONS), default=MIN_ITERATIONS,
              show_default=True)
@_store_options
def add(name: str, mechanisms: tuple[str, ...], password_file, iterations: int,  # type: ignore[no-untyped-def]
        data_dir: Path | None, zookeeper: str | None) -> None:
    """Add NAME (or set its password) for each mechanism."""
    password = password_file.readline().rstrip("\r\n")
    if not name:
        raise click.UsageError("the user name must not be empty")
    if not password:
        raise click.UsageError("the password file is empty")
    with _store(data_dir, zookeeper) as store:
        for mechanism in mechanisms:
            store.put(name, mechanism, make_credential(mechanism, password, iterations))
    click.echo(f"{name}: {', '.join(mechanisms)} set ({iterations} iterations)")


@users.command()
@click.argument("name")
@click.option("--mechanism", type=click.Choice(SCRAM_MECHANISMS), default=None, help="Only this one (default: all).")
@_store_options
def remove(name: str, mechanism: str | None, data_dir: Path | None, zookeeper: str | None) -> None:
    """Remove NAME's credentials."""
    with _store(data_dir, zookeeper) as store:
        if not store.remove(name, mechanism):
            raise click.ClickException(f"{name} has no {mechanism or 'SCRAM'} credential")
    click.echo(f"{name}: removed")


@users.command(name="list")
@_store_options
def list_users(data_dir: Path | None, zookeeper: str | None) -> None:
    """Users and their mechanisms (iterations); never a secret."""
    with _store(data_dir, zookeeper) as store:
        for name, credentials in store.users().items():
            click.echo(f"{name}\t" + ", ".join(f"{m}(iterations={c.iterations})" for m, c in sorted(credentials.items())))
