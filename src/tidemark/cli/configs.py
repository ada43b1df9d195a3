"""`tidemark configs`: describe and alter topic and broker configs of any Kafka cluster, as
kafka-configs.sh does (DescribeConfigs, IncrementalAlterConfigs), printing what the broker answers:

    tidemark configs describe --entity-type topics|brokers [--entity-name NAME | --entity-default] [--all]
    tidemark configs alter --entity-type topics|brokers (--entity-name NAME | --entity-default)
                           [--add-config K=V,K2=[A,B]] [--delete-config K,K2]
"""

from __future__ import annotations

from typing import Any

import click
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from tidemark.cli.options import Target, cluster_options
from tidemark.cli.output import CliError, CommandGroup, echo_json, output_option
from tidemark.client.admin import Admin, describe_error
from tidemark.client.configs import alter_broker_default, describe_broker_default

_TYPES = {"topics": ConfigResource.Type.TOPIC, "brokers": ConfigResource.Type.BROKER}
_SINGULAR = {"topics": "topic", "brokers": "broker"}


@click.group("configs", cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
def configs() -> None:
    """Describe and alter topic and broker configs (like kafka-configs.sh)."""


def _entity_options(func: Any) -> Any:
    for option in reversed([
        click.option("--entity-type", type=click.Choice(sorted(_TYPES)), required=True),
        click.option("--entity-name", metavar="NAME", help="A topic name or a broker id."),
        click.option("--entity-default", is_flag=True, help="The cluster-wide default (brokers only)."),
    ]):
        func = option(func)
    return func


def _check_entity(entity_type: str, entity_name: str | None, entity_default: bool, required: bool) -> None:
    if entity_name is not None and entity_default:
        raise click.UsageError("--entity-name and --entity-default exclude each other")
    if entity_default and entity_type != "brokers":
        raise click.UsageError("--entity-default is for --entity-type brokers")
    if entity_type == "brokers" and entity_name is not None and not entity_name.isdigit():
        raise click.UsageError(f"The entity name for brokers must be a valid integer broker id, "
                               f"but it is: {entity_name}")
    if required and entity_name is None and not entity_default:
        raise click.UsageError("give --entity-name NAME or --entity-default")


def _source_name(source: Any) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return "UNKNOWN"


def _shown(source: str, entity_type: str, default: bool, describe_all: bool) -> bool:
    """Kafka's tool shows the configs set at the entity's own level, or --all of them."""
    if describe_all:
        return True
    wanted = (ConfigSource.DYNAMIC_TOPIC_CONFIG if entity_type == "topics"
              else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG if default else ConfigSource.DYNAMIC_BROKER_CONFIG)
    return source == wanted.name


def _entry_dict(e: ConfigEntry) -> dict[str, Any]:
    return {"name": e.name, "value": None if e.is_sensitive else e.value, "source": _source_name(e.source),
            "sensitive": bool(e.is_sensitive), "read_only": bool(e.is_read_only),
            "synonyms": [{"source": _source_name(s.source), "name": s.name, "value": s.value}
                         for s in (e.synonyms or {}).values()]}


def _raw(admin: Admin, call: Any) -> Any:
    """A request on the client layer's own connection (PLAINTEXT listeners only)."""
    if not admin.plaintext:
        raise CliError("Error: --entity-default talks to a broker itself and supports PLAINTEXT listeners only")
    try:
        return call()
    except (OSError, ConnectionError) as exc:
        raise CliError(f"Error: the cluster at {admin.bootstrap} did not answer: {exc or type(exc).__name__}") from exc


def _describe(admin: Admin, resources: list[ConfigResource]) -> dict[str, dict[str, ConfigEntry]]:
    if not resources:
        return {}
    futures = admin.admin.describe_configs(resources, request_timeout=admin.timeout_s)
    found = {}
    for resource, future in futures.items():
        try:
            found[resource.name] = future.result(timeout=admin.timeout_s + 1.0)
        except KafkaException as exc:
            raise CliError(f"Error: describing the configs of {resource.name or 'the default'} failed against "
                           f"{admin.bootstrap}: {describe_error(exc)}") from exc
        except TimeoutError as exc:
            raise CliError(f"Error: describing configs timed out after {admin.timeout_s:g}s "
                           f"against {admin.bootstrap}") from exc
    return found


@configs.command("describe")
@cluster_options
@_entity_options
@click.option("--all", "describe_all", is_flag=True, help="Every config, not only the ones set dynamically.")
@output_option
def describe_command(target: Target, entity_type: str, entity_name: str | None, entity_default: bool,
                     describe_all: bool, output: str) -> None:
    """Configs of a topic or broker: those set on it (dynamic), or --all with their sources."""
    _check_entity(entity_type, entity_name, entity_default, required=False)
    admin = target.admin("tidemark-configs")
    if entity_name is not None or entity_default:
        names = [entity_name or ""]
    elif entity_type == "topics":
        names = sorted(admin.topic_partitions())
    else:
        names = [str(b.id) for b in sorted(admin.metadata().brokers.values(), key=lambda b: b.id)]
    named = [name for name in names if name]
    described = _describe(admin, [ConfigResource(_TYPES[entity_type], name) for name in named])
    answer = []
    for name in names:
        if name:
            entries = [_entry_dict(e) for e in described.get(name, {}).values()]
        else:  # the brokers' default: a resource the AdminClient cannot name
            entries = _raw(admin, lambda: describe_broker_default(target.bootstrap, target.timeout_s))
        entries = [e for e in sorted(entries, key=lambda e: e["name"])
                   if _shown(e["source"], entity_type, not name, describe_all)]
        answer.append({"entity_type": entity_type, "entity_name": name or None, "configs": entries})
    if output == "json":
        echo_json(answer)
        return
    for item in answer:
        if item["entity_name"] is None:
            click.echo(f"Default configs for {_SINGULAR[entity_type]}s in the cluster are:")
        else:
            click.echo(f"{'All' if describe_all else 'Dynamic'} configs for {_SINGULAR[entity_type]} "
                       f"{item['entity_name']} are:")
        for c in item["configs"]:
            synonyms = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in c["synonyms"])
            click.echo(f"  {c['name']}={'null' if c['sensitive'] else c['value']} "
                       f"sensitive={'true' if c['sensitive'] else 'false'} synonyms={{{synonyms}}}")


def parse_add_config(text: str) -> dict[str, str]:
    """K=V,K2=[A,B]: commas inside brackets belong to the value (a list value, sent as A,B)."""
    items: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if current:
        items.append(current)
    config: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected K=V[,K=V...], got {text!r}", param_hint="--add-config")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        config[key.strip()] = value
    return config


@configs.command("alter")
@cluster_options
@_entity_options
@click.option("--add-config", "add", metavar="K=V,...", help="Configs to set; [A,B] for a list value.")
@click.option("--delete-config", "delete", metavar="K,...", help="Configs to remove (back to their default).")
def alter_command(target: Target, entity_type: str, entity_name: str | None, entity_default: bool,
                  add: str | None, delete: str | None) -> None:
    """Set or remove configs of a topic, a broker, or the brokers' cluster default."""
    _check_entity(entity_type, entity_name, entity_default, required=True)
    to_set = parse_add_config(add) if add else {}
    to_delete = [key.strip() for key in delete.split(",") if key.strip()] if delete else []
    if not to_set and not to_delete:
        raise click.UsageError("give --add-config or --delete-config")
    both = sorted(set(to_set) & set(to_delete))
    if both:
        raise click.UsageError(f"Invalid alter config, a config cannot be both added and deleted: {', '.join(both)}")
    admin = target.admin("tidemark-configs")
    if entity_name is None:
        _raw(admin, lambda: alter_broker_default(target.bootstrap, target.timeout_s, to_set, to_delete))
    else:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_set.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
        resource = ConfigResource(_TYPES[entity_type], entity_name, incremental_configs=entries)
        futures = admin.admin.incremental_alter_configs([resource], request_timeout=admin.timeout_s)
        for future in futures.values():
            try:
                future.result(timeout=admin.timeout_s + 1.0)
            except KafkaException as exc:
                raise CliError(f"Error while executing config command: {describe_error(exc)}") from exc
            except TimeoutError as exc:
                raise CliError(f"Error: altering configs timed out after {admin.timeout_s:g}s "
                               f"against {admin.bootstrap}") from exc
    if entity_name is None:
        click.echo(f"Completed updating default config for {_SINGULAR[entity_type]}s in the cluster.")
    else:
        click.echo(f"Completed updating config for {_SINGULAR[entity_type]} {entity_name}.")
