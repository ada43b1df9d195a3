"""`tidemark quotas set|list`: client quotas over the wire (AlterClientQuotas and
DescribeClientQuotas), against tidemark or any Kafka cluster, after kafka-configs.sh:

    tidemark quotas set --bootstrap-server HOST:PORT --entity-type users --entity-name alice
        [--entity-type clients (--entity-name app | --entity-default)]
        [--add-config 'producer_byte_rate=1024,request_percentage=50'] [--delete-config KEY,...]
    tidemark quotas list --bootstrap-server HOST:PORT [--entity-type users|clients
        [--entity-name NAME | --entity-default]]...

Each --entity-name or --entity-default names the entity of the --entity-type before it; `list`
without an entity lists every quota.
"""

from __future__ import annotations

import asyncio
from typing import Any

import click

from tidemark.client.reach import split_host_port, unreachable
from tidemark.wire.client import BrokerConnection

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 48, 49
VERSION = 0  # every Kafka with these APIs (2.6+) serves v0
ENTITY_TYPES = {"users": "user", "clients": "client-id"}
LABELS = {"user": "user-principal", "client-id": "client-id"}
MATCH_EXACT, MATCH_DEFAULT = 0, 1


class QuotasError(click.ClickException):
    def show(self, file: Any = None) -> None:
        click.echo(self.message, err=True)


def parse_entity(args: list[str]) -> list[tuple[str, str | None]]:
    """[(entity type, name or None for the default)] from --entity-type/--entity-name/
    --entity-default in their order."""
    entity: list[tuple[str, str | None]] = []
    named: set[str] = set()
    tokens = iter(args)
    for token in tokens:
        option, _, inline = token.partition("=")
        if option in ("--entity-type", "--entity-name"):
            value = inline or next(tokens, None)
            if value is None:
                raise click.UsageError(f"{option} needs a value")
            if option == "--entity-type":
                if value not in ENTITY_TYPES:
                    raise click.UsageError(f"--entity-type must be users or clients, got {value!r}")
                if ENTITY_TYPES[value] in (t for t, _ in entity) or any(t == ENTITY_TYPES[value] for t in named):
                    raise click.UsageError(f"--entity-type {value} given twice")
                entity.append((ENTITY_TYPES[value], ""))
                continue
        elif token != "--entity-default":
            raise click.UsageError(f"unknown option {token!r}")
        if not entity or entity[-1][0] in named:
            raise click.UsageError(f"{option} must follow its --entity-type")
        entity[-1] = (entity[-1][0], None if token == "--entity-default" else value)
        named.add(entity[-1][0])
    unnamed = [t for t, _ in entity if t not in named]
    if unnamed:
        raise click.UsageError(f"--entity-type {unnamed[0]} needs --entity-name or --entity-default")
    return entity


def _parse_configs(text: str) -> list[tuple[str, float]]:
    configs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        key, sep, value = item.partition("=")
        try:
            configs.append((key.strip(), float(value)))
        except ValueError:
            raise click.UsageError(f"--add-config expects key=number pairs, got {item!r}") from None
        if not sep:
            raise click.UsageError(f"--add-config expects key=number pairs, got {item!r}")
    return configs


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def describe_entity(entity: list[tuple[str, str | None]]) -> str:
    return ", ".join(f"the default {LABELS[t]}" if n is None else f"{LABELS[t]} '{n}'" for t, n in entity)


async def _request(bootstrap: str, api_key: int, body: dict[str, Any], timeout_s: float) -> Any:
    last: Exception | None = None
    for server in (s.strip() for s in bootstrap.split(",") if s.strip()):
        host, port = split_host_port(server)
        if port is None:
            continue
        try:
            connection = await BrokerConnection.connect(host, port, "tidemark-quotas", timeout_s)
        except (OSError, TimeoutError) as exc:
            last = exc
            continue
        try:
            return await connection.request(api_key, VERSION, body, timeout_s)
        finally:
            await connection.close()
    raise QuotasError(f"Error: cannot reach bootstrap server {bootstrap}: {last!r}")


def _call(bootstrap: str, api_key: int, body: dict[str, Any], timeout_ms: int) -> Any:
    timeout_s = timeout_ms / 1000
    why = unreachable(bootstrap, timeout_s)
    if why is not None:
        raise QuotasError(f"Error: cannot reach bootstrap server {bootstrap}: {why}")
    try:
        return asyncio.run(_request(bootstrap, api_key, body, timeout_s))
    except TimeoutError:
        raise QuotasError(f"Error: no answer from {bootstrap} within {timeout_s:g}s") from None
    except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
        raise QuotasError(f"Error: {bootstrap} closed the connection: {exc!r} (does it serve client quotas?)") from None


_ENTITY_OPTIONS = {"ignore_unknown_options": True, "allow_extra_args": True}
_bootstrap = click.option("--bootstrap-server", "bootstrap", required=True, help="HOST:PORT[,HOST:PORT...]")
_timeout = click.option("--timeout-ms", "timeout_ms", type=click.IntRange(1), default=30000, show_default=True)


@click.group()
def quotas() -> None:
    """Client quotas by user and client id (producer_byte_rate, consumer_byte_rate,
    request_percentage), over the wire against any Kafka cluster."""


@quotas.command("set", context_settings=_ENTITY_OPTIONS)
@_bootstrap
@click.option("--add-config", default="", help="key=value,... e.g. 'producer_byte_rate=1024,request_percentage=50'")
@click.option("--delete-config", default="", help="key,... to remove")
@_timeout
@click.pass_context
def set_quotas(ctx: click.Context, bootstrap: str, add_config: str, delete_config: str, timeout_ms: int) -> None:
    """Set (--add-config) or remove (--delete-config) an entity's quotas. The entity:
    --entity-type users|clients with --entity-name NAME or --entity-default, once or for both."""
    entity = parse_entity(ctx.args)
    if not entity:
        raise click.UsageError("name the entity: --entity-type users|clients --entity-name NAME|--entity-default")
    ops = [{"key": k, "value": v, "remove": False} for k, v in _parse_configs(add_config)]
    ops += [{"key": k.strip(), "value": 0.0, "remove": True} for k in delete_config.split(",") if k.strip()]
    if not ops:
        raise click.UsageError("nothing to change: give --add-config and/or --delete-config")
    response = _call(bootstrap, ALTER_CLIENT_QUOTAS, {"entries": [{
        "entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "ops": ops}], "validate_only": False},
        timeout_ms)
    for entry in response.entries:
        if entry.error_code.value != 0:
            raise QuotasError(f"Error: updating quotas for {describe_entity(entity)} failed: "
                              f"{entry.error_code.name.upper()}: {entry.error_message}")
    click.echo(f"Completed updating quotas for {describe_entity(entity)}.")


@quotas.command("list", context_settings=_ENTITY_OPTIONS)
@_bootstrap
@_timeout
@click.pass_context
def list_quotas(ctx: click.Context, bootstrap: str, timeout_ms: int) -> None:
    """List quotas: every entity's, or those of the entity named."""
    entity = parse_entity(ctx.args)
    components = [{"entity_type": t, "match_type": MATCH_DEFAULT if n is None else MATCH_EXACT, "match": n}
                  for t, n in entity]
    response = _call(bootstrap, DESCRIBE_CLIENT_QUOTAS, {"components": components, "strict": bool(entity)},
                     timeout_ms)
    if response.error_code.value != 0:
        raise QuotasError(f"Error: describing quotas failed: {response.error_code.name.upper()}: {response.error_message}")
    for entry in response.entries or ():
        described = describe_entity([(e.entity_type, e.entity_name) for e in entry.entity])
        values = ", ".join(f"{v.key}={_number(v.value)}" for v in sorted(entry.values, key=lambda v: v.key))
        click.echo(f"Quota configs for {described} are {values}")
