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

from tidemark.broker.config import (
    BROKER_SETTINGS, DYNAMIC_BROKER, DYNAMIC_DEFAULT, LAYERS, SENSITIVE_SETTINGS, STATIC, TOPIC_CONFIG_TYPES, TOPIC_SETTINGS,
    BrokerConfig,
)
from tidemark.broker.dynamic_config import DYNAMIC_SETTINGS, STORED_DYNAMIC_SETTINGS

# Kafka's ConfigSource ids.
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
_SOURCES = {DYNAMIC_BROKER: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT: DYNAMIC_DEFAULT_BROKER_CONFIG,
            STATIC: STATIC_BROKER_CONFIG}

# Kafka's ConfigType ids (DescribeConfigs v3+).
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}

# A topic config's broker settings, highest precedence first, where there are several.
_TOPIC_SYNONYMS = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}
# A broker setting's synonyms, highest precedence first (Kafka's brokerConfigSynonyms).
_BROKER_SYNONYMS = {name: names for names in _TOPIC_SYNONYMS.values() for name in names}
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
    if isinstance(value, dict):  # max.connections.per.ip.overrides, listener.security.protocol.map
        return ",".join(f"{host}:{count}" for host, count in value.items())
    if isinstance(value, frozenset):  # super.users
        return ";".join(sorted(value))
    if isinstance(value, tuple):  # sasl.enabled.mechanisms
        return ",".join(value)
    return str(value)


def broker_config_type(name: str) -> str:
    if name in STORED_DYNAMIC_SETTINGS:
        return STORED_DYNAMIC_SETTINGS[name]
    setting = BROKER_SETTINGS[name]
    if isinstance(setting.default, bool):
        return "BOOLEAN"
    if isinstance(setting.default, float):
        return "DOUBLE"
    if name in SENSITIVE_SETTINGS:
        return "PASSWORD"
    if name == "log.cleanup.policy" or isinstance(setting.default, tuple):
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


def _broker_synonyms(config: BrokerConfig, names: tuple[str, ...], per_broker: bool = True) -> list[dict[str, Any]]:
    """Every place the value of the broker settings `names` could come from that holds one:
    for each name in precedence order its dynamic (this broker's, then the cluster default),
    static and Kafka's default values. Without `per_broker` (the cluster-default resource) this
    broker's own dynamic values are left out, as Kafka does."""
    synonyms = []
    for name in names:
        for layer in LAYERS:
            if (per_broker or layer != DYNAMIC_BROKER) and config.holds(layer, name):
                synonyms.append(_synonym(name, config.layer_value(layer, name), _SOURCES[layer]))
        if name in BROKER_SETTINGS and name not in _NO_KAFKA_DEFAULT:
            synonyms.append(_synonym(name, BROKER_SETTINGS[name].default, DEFAULT_CONFIG))
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


def _broker_entry(config: BrokerConfig, name: str, value: Any, include_synonyms: bool,
                  per_broker: bool) -> dict[str, Any]:
    synonyms = _broker_synonyms(config, _BROKER_SYNONYMS.get(name, (name,)), per_broker)
    source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
    entry = _entry(name, to_string(value), source, broker_config_type(name), synonyms, include_synonyms,
                   read_only=name not in DYNAMIC_SETTINGS and name not in STORED_DYNAMIC_SETTINGS)
    if name in SENSITIVE_SETTINGS:  # as Kafka: a password's value is never shown, nor its synonyms'
        entry["value"], entry["is_sensitive"] = None, True
        for synonym in entry["synonyms"]:
            synonym["value"] = None
    return entry


def broker_entries(config: BrokerConfig, include_synonyms: bool) -> list[dict[str, Any]]:
    """This broker's settings, each with the value in effect and where it comes from; then
    Kafka's dynamic settings tidemark only keeps, where set."""
    entries = []
    for name in BROKER_SETTINGS:
        value = config[name] if config.is_set(name) or name not in _NO_KAFKA_DEFAULT else None
        entries.append(_broker_entry(config, name, value, include_synonyms, per_broker=True))
    for name in STORED_DYNAMIC_SETTINGS:
        if config.is_set(name):
            entries.append(_broker_entry(config, name, config[name], include_synonyms, per_broker=True))
    return entries


def default_broker_entries(config: BrokerConfig, include_synonyms: bool) -> list[dict[str, Any]]:
    """The cluster-wide dynamic defaults (the broker resource ""): only the settings set there."""
    return [_broker_entry(config, name, value, include_synonyms, per_broker=False)
            for name, value in config.dynamic(DYNAMIC_DEFAULT).items()]
