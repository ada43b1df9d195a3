"""The options every command that talks to a cluster takes, as Kafka's tools name them:
--bootstrap-server, --timeout (ms), --command-config FILE (Java properties) and -X KEY=VALUE
(which wins over the file). A command receives them as one `Target`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from tidemark.cli.properties import parse_properties, to_librdkafka
from tidemark.client.admin import Admin

DEFAULT_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class Target:
    bootstrap: str
    timeout_ms: int
    config: dict[str, str] = field(default_factory=dict)

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def admin(self, client_id: str = "tidemark-admin") -> Admin:
        """An AdminClient on the target, its bootstrap checked reachable first."""
        admin = Admin(self.bootstrap, self.timeout_ms, self.config, client_id)
        admin.check_reachable()
        return admin


def parse_client_config(values: Sequence[str], option: str = "--client-config") -> dict[str, str]:
    """KEY=VALUE items as a dict (a later key wins)."""
    config: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint=option)
        config[key.strip()] = value
    return config


def client_settings(client_config: Sequence[str], command_config: Any) -> dict[str, str]:
    """The client settings of --command-config (an open file or None) and -X, -X winning."""
    config: dict[str, str] = {}
    if command_config is not None:
        try:
            config = to_librdkafka(parse_properties(command_config.read()))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--command-config") from None
    config.update(parse_client_config(client_config))
    return config


def security_options() -> list[Callable[..., Any]]:
    """--command-config FILE and -X KEY=VALUE, as click options (parameters command_config, client_config)."""
    return [
        click.option("--command-config", "command_config", type=click.File("r"), metavar="FILE",
                     help="Client properties file (security.protocol, sasl.*, ssl.*), as Kafka's tools take."),
        click.option("--client-config", "-X", "client_config", multiple=True, metavar="KEY=VALUE",
                     help="Extra client property; repeatable; wins over --command-config."),
    ]


def _target(bootstrap: str, timeout_ms: int, client_config: Sequence[str], command_config: Any) -> Target:
    return Target(bootstrap, timeout_ms, client_settings(client_config, command_config))


def cluster_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the cluster options to a click command; it gets them as `target: Target`."""

    @functools.wraps(func)
    def wrapper(*args: Any, bootstrap: str, timeout_ms: int, client_config: tuple[str, ...], command_config: Any,
                **kwargs: Any) -> Any:
        return func(*args, target=_target(bootstrap, timeout_ms, client_config, command_config), **kwargs)

    options = [
        click.option("--bootstrap-server", "bootstrap", required=True, metavar="HOST:PORT",
                     help="Kafka protocol address(es) to bootstrap from, comma separated."),
        click.option("--timeout", "timeout_ms", type=click.IntRange(min=1), default=DEFAULT_TIMEOUT_MS,
                     show_default=True, metavar="MS", help="Bound on every wait for the cluster, in milliseconds."),
        *security_options(),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
