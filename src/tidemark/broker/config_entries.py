"""Configs as DescribeConfigs reports them: Kafka's value strings, sources, synonyms and types.

A topic config's value is its override (source DYNAMIC_TOPIC_CONFIG) or else the broker setting
it falls back to: STATIC_BROKER_CONFIG when that was set in server.properties or --set,
DEFAULT_CONFIG otherwise. Its synonyms list, highest precedence first, every place the value
could come from that holds one, as Kafka's ConfigHelper does. Broker configs are read-only
here (tidemark has no dynamic broker configs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tidemark.broker.config import BROKER_SETTINGS, TOPIC_CONFIG_TYPES, TOPIC_SETTINGS, BrokerConfig

# Kafka's ConfigSource ids.
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Kafka's ConfigType ids (DescribeConfigs v3+).
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7}

# A topic config's broker settings, highest precedence first, where there are several.
_TOPIC_SYNONYMS = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}
# Broker settings Kafka declares without a default (a lower-precedence synonym carries it).
_NO_KAFKA_DEFAULT = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms", "zookeeper.connect"})

# Broker settings Kafka types LONG (the other integers are INT; SHORT for the replication factor).
_LONG_BROKER_SETTINGS = frozenset({
    "log.roll.ms", "log.retention.ms", "log.retention.bytes", "log.retention.check.interval.ms",
    "log.flush.interval.messages", "log.flush.interval.ms", "offsets.retention.check.interval.ms",
    "log.cleaner.backoff.ms", "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms",
})
# Kafka's default for log.cleaner.io.max.bytes.per.second (Double.MAX_VALUE: unthrottled).
_JAVA_DOUBLE_MAX = "1.7976931348623157E308"


def to_string(value: Any) -> str | None:
    """A parsed value in Kafka's text form (ConfigDef.convertToString)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _JAVA_DOUBLE_MAX if math.isinf(value) else repr(value)
    if isinstance(value, dict):  # max.connections.per.ip.overrides
        return ",".join(f"{host}:{count}" for host, count in value.items())
    return str(value)


def broker_config_type(name: str) -> str:
    setting = BROKER_SETTINGS[name]
    if isinstance(setting.default, bool):
        return "BOOLEAN"
    if isinstance(setting.default, float):
        return "DOUBLE"
    if name == "log.cleanup.policy":
        return "LIST"
    if isinstance(setting.default, int):
        if name == "offsets.topic.replication.factor":
            return "SHORT"
        return "LONG" if name in _LONG_BROKER_SETTINGS else "INT"
    return "STRING"


def _entry(name: str, value: str | None, source: int, config_type: str, synonyms: list[dict[str, Any]],
           include_synonyms: bool, read_only: bool) -> dict[str, Any]:
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_sensitive": False, "synonyms": synonyms if include_synonyms else [],
            "config_type": CONFIG_TYPES[config_type], "documentation": None}


def _synonym(name: str, value: Any, source: int) -> dict[str, Any]:
    return {"name": name, "value": to_string(value), "source": source}


def _broker_synonyms(config: BrokerConfig, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The broker settings behind a value: those set explicitly, then the one Kafka's default is on."""
    synonyms = [_synonym(name, config[name], STATIC_BROKER_CONFIG) for name in names if config.is_set(name)]
    with_default = next((name for name in names if name not in _NO_KAFKA_DEFAULT), None)
    if with_default is not None:
        synonyms.append(_synonym(with_default, BROKER_SETTINGS[with_default].default, DEFAULT_CONFIG))
    return synonyms


def topic_entries(config: BrokerConfig, overrides: Mapping[str, Any], include_synonyms: bool) -> list[dict[str, Any]]:
    """Every topic config tidemark applies, and every other override the topic holds."""
    defaults = config.topic_defaults()
    names = list(TOPIC_SETTINGS) + sorted(name for name in overrides if name not in TOPIC_SETTINGS)
    entries = []
    for name in names:
        synonyms = [_synonym(name, overrides[name], DYNAMIC_TOPIC_CONFIG)] if name in overrides else []
        if name in TOPIC_SETTINGS:
            synonyms += _broker_synonyms(config, _TOPIC_SYNONYMS.get(name, (TOPIC_SETTINGS[name][0],)))
        value = overrides[name] if name in overrides else defaults.get(name)
        source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
        entries.append(_entry(name, to_string(value), source, TOPIC_CONFIG_TYPES[name], synonyms,
                              include_synonyms, read_only=False))
    return entries


def broker_entries(config: BrokerConfig, include_synonyms: bool) -> list[dict[str, Any]]:
    """The broker's settings, read-only: set explicitly (STATIC_BROKER_CONFIG) or defaults."""
    entries = []
    for name in BROKER_SETTINGS:
        source = STATIC_BROKER_CONFIG if config.is_set(name) else DEFAULT_CONFIG
        value = to_string(config[name]) if config.is_set(name) or name not in _NO_KAFKA_DEFAULT else None
        synonyms = [{"name": name, "value": value, "source": source}] if value is not None else []
        entries.append(_entry(name, value, source, broker_config_type(name), synonyms, include_synonyms,
                              read_only=True))
    return entries
