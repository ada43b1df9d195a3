"""A stock Kafka server.properties for `tidemark serve --config`: `log.dirs` becomes the data
directory (unless --data-dir says otherwise), the settings tidemark has (`listeners` among them)
are passed on, and the ones it does not implement are listed once at start rather than refused,
unless they change what the broker means (KRaft roles, several log directories), which are
refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tidemark.broker.config import BROKER_SETTINGS, ConfigError
from tidemark.cli.properties import parse_properties

# Settings whose meaning is the location of the broker's data or socket: read, not passed on.
_PLACES = ("log.dirs", "log.dir")


@dataclass
class ServerProperties:
    settings: dict[str, str] = field(default_factory=dict)  # what BrokerConfig takes
    data_dir: Path | None = None
    not_implemented: list[str] = field(default_factory=list)


def _refuse_semantic_changes(properties: dict[str, str]) -> None:
    if properties.get("process.roles", "").strip():
        raise ConfigError("process.roles: KRaft mode is not implemented; tidemark runs on its embedded metadata "
                          "or ZooKeeper (zookeeper.connect)")


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
    for name, value in properties.items():
        if name in _PLACES:
            continue
        if name in BROKER_SETTINGS:
            result.settings[name] = value
        else:
            result.not_implemented.append(name)
    result.not_implemented.sort()
    return result
