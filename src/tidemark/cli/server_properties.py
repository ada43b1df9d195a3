"""A stock Kafka server.properties for `tidemark serve --config`: `log.dirs` and `listeners` become
the data directory and the listener (unless --data-dir or --listen say otherwise), the settings
tidemark has are passed on, and the ones it does not implement are listed once at start rather
than refused, unless they change what the broker means (KRaft roles, an authorizer, a listener
or inter-broker protocol other than PLAINTEXT, several log directories), which are refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tidemark.broker.config import BROKER_SETTINGS, ConfigError
from tidemark.cli.properties import parse_properties

# Settings whose meaning is the location of the broker's data or socket: read, not passed on.
_PLACES = ("log.dirs", "log.dir", "listeners")


@dataclass
class ServerProperties:
    settings: dict[str, str] = field(default_factory=dict)  # what BrokerConfig takes
    data_dir: Path | None = None
    listen: str | None = None  # HOST:PORT
    not_implemented: list[str] = field(default_factory=list)


def _listener(value: str) -> str:
    """`PLAINTEXT://host:port` (one listener, host empty for every interface) as HOST:PORT."""
    listeners = [part.strip() for part in value.split(",") if part.strip()]
    if len(listeners) != 1:
        raise ConfigError(f"listeners={value!r}: tidemark serves one PLAINTEXT listener")
    scheme, sep, address = listeners[0].partition("://")
    if not sep or scheme.upper() != "PLAINTEXT":
        raise ConfigError(f"listeners={value!r}: tidemark serves PLAINTEXT only (no TLS, no SASL)")
    host, _, port = address.rpartition(":")
    return f"{host or '0.0.0.0'}:{port}"


def _refuse_semantic_changes(properties: dict[str, str]) -> None:
    if properties.get("process.roles", "").strip():
        raise ConfigError("process.roles: KRaft mode is not implemented; tidemark runs on its embedded metadata "
                          "or ZooKeeper (zookeeper.connect)")
    if properties.get("authorizer.class.name", "").strip():
        raise ConfigError("authorizer.class.name: tidemark has no ACLs; refusing to start an open broker "
                          "where an authorizer was asked for")
    protocol = properties.get("security.inter.broker.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise ConfigError(f"security.inter.broker.protocol={protocol}: tidemark speaks PLAINTEXT only")


def read_server_properties(path: Path) -> ServerProperties:
    properties = parse_properties(path.read_text())
    _refuse_semantic_changes(properties)
    result = ServerProperties()
    dirs = properties.get("log.dirs") or properties.get("log.dir")
    if dirs:
        listed = [d.strip() for d in dirs.split(",") if d.strip()]
        if len(listed) != 1:
            raise ConfigError(f"log.dirs={dirs!r}: tidemark keeps one data directory")
        result.data_dir = Path(listed[0])
    if properties.get("listeners", "").strip():
        result.listen = _listener(properties["listeners"])
    for name, value in properties.items():
        if name in _PLACES:
            continue
        if name in BROKER_SETTINGS:
            result.settings[name] = value
        else:
            result.not_implemented.append(name)
    result.not_implemented.sort()
    return result
