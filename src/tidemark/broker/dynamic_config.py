"""Kafka's dynamic broker settings: AlterConfigs and IncrementalAlterConfigs on a broker resource
(this broker's id, or "" for the cluster-wide defaults) change settings without a restart.

Kafka keeps them in ZooKeeper (/config/brokers/N, /config/brokers/<default>, each change
announced by a /config/changes notice that every broker follows); a single broker keeps them in
its data directory's metadata file. Each broker resolves a setting as this broker's dynamic
value, else the cluster default, else server.properties/--set, else Kafka's default
(BrokerConfig's layers), and what a change touches is applied at once: the log defaults to every
topic without its own override (the retention loop, the cleaner and appends read them), the
cleaner's rate and back-off, the connection caps on the listener.

Only the settings Kafka updates dynamically are accepted; the rest are refused as Kafka refuses
them (INVALID_REQUEST, "Cannot update these configs dynamically: Set(...)"). Kafka's dynamic
settings tidemark has no use for (its thread pools, replication throttles) are kept and shown,
as a topic's unknown-to-tidemark settings are, without effect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog
from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from tidemark.broker.config import (
    DYNAMIC_BROKER, DYNAMIC_DEFAULT, TOPIC_SETTINGS, BrokerConfig, ConfigError, parse_setting,
)
from tidemark.cluster.zk import config_changes
from tidemark.cluster.zk.zk_data import DEFAULT_BROKER_ENTITY

if TYPE_CHECKING:
    from tidemark.broker.cluster import ClusterLink
    from tidemark.broker.server import Broker
    from tidemark.cluster.zk.session import ZkSession
    from tidemark.replication.partition_manager import PartitionManager

log = structlog.get_logger("tidemark.dynamic_config")

# The log defaults topics fall back to (Kafka's DynamicLogConfig: every topic setting's broker
# synonym; log.retention.minutes/.hours and log.roll.hours stay read-only, as in Kafka).
LOG_DEFAULT_SETTINGS = frozenset(broker_name for broker_name, _ in TOPIC_SETTINGS.values()) | {
    "unclean.leader.election.enable", "producer.id.expiration.ms"}
CLEANER_SETTINGS = frozenset({"log.cleaner.threads", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms"})
CONNECTION_SETTINGS = frozenset({"max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"})
# tidemark's settings that Kafka updates dynamically, all of them cluster-wide (settable as the
# default and per broker); tidemark applies each at once.
DYNAMIC_SETTINGS = LOG_DEFAULT_SETTINGS | CLEANER_SETTINGS | CONNECTION_SETTINGS

# Kafka's other dynamic settings, by Kafka's type: accepted, stored and described, not acted on
# (tidemark has asyncio instead of I/O and network threads, no replication throttles yet).
STORED_DYNAMIC_SETTINGS: dict[str, str] = {
    "log.cleaner.dedupe.buffer.size": "LONG",
    "log.cleaner.io.buffer.size": "INT", "log.cleaner.io.buffer.load.factor": "DOUBLE",
    "log.cleaner.max.compaction.lag.ms": "LONG", "log.segment.delete.delay.ms": "LONG",
    "log.preallocate": "BOOLEAN", "log.message.downconversion.enable": "BOOLEAN",
    "log.message.timestamp.difference.max.ms": "LONG", "compression.type": "STRING",
    "num.io.threads": "INT", "num.network.threads": "INT", "num.replica.fetchers": "INT",
    "num.recovery.threads.per.data.dir": "INT", "background.threads": "INT",
    "max.connection.creation.rate": "INT", "leader.replication.throttled.rate": "LONG",
    "follower.replication.throttled.rate": "LONG", "replica.alter.log.dirs.io.max.bytes.per.second": "LONG",
    "metric.reporters": "LIST",
}
# Kafka's lower bounds of those (thread counts at least 1; rates and sizes not negative).
_STORED_MINIMUMS = {name: 1 for name in STORED_DYNAMIC_SETTINGS if name.endswith("threads")
                    or name.endswith(".threads.per.data.dir") or name == "num.replica.fetchers"}


class DynamicConfigRefused(Exception):
    """A change is refused with `code` and Kafka's `message`."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def layer_of(resource_name: str) -> str:
    """A broker resource's layer: "" is the cluster-wide default, a broker id that broker's."""
    return DYNAMIC_DEFAULT if resource_name == "" else DYNAMIC_BROKER


def entity_of(resource_name: str) -> str:
    """The stored entity of a broker resource: "<default>" for "", else the id."""
    return DEFAULT_BROKER_ENTITY if resource_name == "" else resource_name


def _parse_stored(name: str, raw: str) -> str:
    kind = STORED_DYNAMIC_SETTINGS[name]
    try:
        if kind in ("INT", "LONG"):
            value: Any = int(raw.strip())
        elif kind == "DOUBLE":
            value = float(raw.strip())
        elif kind == "BOOLEAN":
            if raw.strip().lower() not in ("true", "false"):
                raise ValueError
            return raw.strip().lower()
        else:
            return raw
    except ValueError:
        raise ConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type {kind}"
                          if kind != "BOOLEAN" else
                          f"Invalid value {raw} for configuration {name}: Expected value to be either true or false")
    minimum = _STORED_MINIMUMS.get(name, 0)
    if value < minimum:
        raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be at least {minimum}")
    return raw.strip()


def parse(configs: Mapping[str, str]) -> dict[str, Any]:
    """A dynamic layer's settings from their text: read-only names refused as Kafka refuses them
    (INVALID_REQUEST), then each value parsed and bounded (INVALID_CONFIG)."""
    from tidemark.broker.config_entries import broker_config_type

    fixed = sorted(name for name in configs if name not in DYNAMIC_SETTINGS and name not in STORED_DYNAMIC_SETTINGS)
    if fixed:
        raise DynamicConfigRefused(ErrorCode.invalid_request,
                                   f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    parsed: dict[str, Any] = {}
    try:
        for name, raw in configs.items():
            if name in STORED_DYNAMIC_SETTINGS:
                parsed[name] = _parse_stored(name, raw)
            else:
                parsed[name] = parse_setting(name, raw, broker_config_type(name))
    except ConfigError as exc:
        raise DynamicConfigRefused(ErrorCode.invalid_config, str(exc)) from None
    if parsed.get("unclean.leader.election.enable"):
        raise DynamicConfigRefused(ErrorCode.invalid_config, "unclean.leader.election.enable=true is not supported: "
                                   "tidemark elects leaders from the in-sync replicas only")
    return parsed


def usable(configs: Mapping[str, str], entity: str) -> dict[str, Any]:
    """What a stored layer holds that this broker can apply: settings it cannot (written by a
    newer or other broker, or no longer valid) are logged and left out, as Kafka does at start."""
    parsed = {}
    for name, raw in configs.items():
        try:
            parsed.update(parse({name: raw}))
        except DynamicConfigRefused as refused:
            log.warning("dynamic_broker_config_ignored", entity=entity, name=name, error=refused.message)
    return parsed


def current_text(config: BrokerConfig, layer: str) -> dict[str, str]:
    from tidemark.broker.config_entries import to_string

    return {name: str(to_string(value)) for name, value in config.dynamic(layer).items()}


async def alter(config: BrokerConfig, replicas: PartitionManager, cluster: ClusterLink | None,
                resource_name: str, change: Callable[[dict[str, str]], dict[str, str]], validate_only: bool) -> None:
    """Make `change(the resource's dynamic settings)` the whole of them: validated (as a whole
    with the layers it goes with), stored (ZooKeeper with its change notice, or the data
    directory), then applied here; the other brokers apply them at the notice. In ZooKeeper the
    change is applied to what the znode holds, with a versioned write: another broker's
    concurrent change is kept, not overwritten."""
    layer = layer_of(resource_name)
    entity = entity_of(resource_name)

    def checked(current: dict[str, str]) -> dict[str, str]:
        configs = change(current)
        try:
            resolved = config.check_dynamic(layer, parse(configs))
        except ConfigError as exc:
            raise DynamicConfigRefused(ErrorCode.invalid_config, str(exc)) from None
        _check_cleaner_threads(resolved["log.cleaner.threads"], config["log.cleaner.threads"])
        return configs

    if validate_only:
        checked(current_text(config, layer))
        return
    if cluster is not None:  # a ZooKeeper write, off the event loop
        def update(stored: dict[str, str]) -> dict[str, str]:
            return checked({name: stored[name] for name in usable(stored, entity)})

        configs = await cluster.session.call(config_changes.update_broker_config, cluster.client, entity, update)
        # Read back in turn with the notices being handled, so an older notice's read is never
        # applied after this change.
        await cluster.broker_config_reloads.reload(entity)
    else:
        configs = checked(current_text(config, layer))
        replicas.metadata.set_broker_configs(entity, dict(configs))
        config.set_dynamic(layer, parse(configs))
    log.info("dynamic_broker_configs_altered", entity=entity, configs=dict(configs))


def _check_cleaner_threads(threads: int, current: int) -> None:
    """Kafka's bounds on resizing the cleaner: at least one, at most double, at least half."""
    if threads == current:
        return
    message = None
    if threads < 1:
        message = "Log cleaner threads should be at least 1"
    elif threads < current / 2:
        message = f"Log cleaner threads cannot be reduced to less than half the current value {current}"
    elif threads > current * 2:
        message = f"Log cleaner threads cannot be increased to more than double the current value {current}"
    if message is not None:
        raise DynamicConfigRefused(ErrorCode.invalid_config, message)


def _use(config: BrokerConfig, layer: str, stored: Mapping[str, str], entity: str) -> set[str]:
    """Apply a stored layer; one that would not go with the others (written against another
    broker's layers) is logged and left as it was, as Kafka leaves a config update it cannot
    apply."""
    try:
        return config.set_dynamic(layer, usable(stored, entity))
    except ConfigError as exc:
        log.warning("dynamic_broker_configs_ignored", entity=entity, configs=dict(stored), error=str(exc))
        return set()


def load_embedded(config: BrokerConfig, replicas: PartitionManager) -> None:
    """At start on a single broker: the layers its data directory holds."""
    stored = replicas.metadata.broker_configs
    _use(config, DYNAMIC_DEFAULT, stored.get(DEFAULT_BROKER_ENTITY, {}), DEFAULT_BROKER_ENTITY)
    own = str(config.node_id)
    _use(config, DYNAMIC_BROKER, stored.get(own, {}), own)


class BrokerConfigReloads:
    """In a cluster: the dynamic settings ZooKeeper holds for the default entity and this broker,
    read at start and again at each change notice naming one of them, in notice order."""

    def __init__(self, config: BrokerConfig, session: ZkSession) -> None:
        self.config = config
        self.session = session
        self._lock = asyncio.Lock()

    def applies(self, entity: str) -> bool:
        return entity in (DEFAULT_BROKER_ENTITY, str(self.config.node_id))

    async def reload(self, entity: str) -> None:
        if not self.applies(entity):
            return
        async with self._lock:  # in the notices' order: the newest read is applied last
            try:
                stored = await self.session.call(config_changes.read_broker_config, self.session.client, entity)
            except KazooException as exc:
                log.warning("dynamic_broker_configs_not_reloaded", entity=entity, error=repr(exc))
                return
            layer = DYNAMIC_DEFAULT if entity == DEFAULT_BROKER_ENTITY else DYNAMIC_BROKER
            changed = _use(self.config, layer, stored, entity)
            log.info("dynamic_broker_configs_reloaded", entity=entity, configs=stored, changed=sorted(changed))

    async def load(self, timeout_s: float) -> None:
        """At start, before the logs open (a failure to read fails the start, as Kafka's does)."""
        for entity in (DEFAULT_BROKER_ENTITY, str(self.config.node_id)):
            stored = await self.session.call(config_changes.read_broker_config, self.session.client, entity,
                                             timeout_s=timeout_s)
            _use(self.config, DYNAMIC_DEFAULT if entity == DEFAULT_BROKER_ENTITY else DYNAMIC_BROKER, stored, entity)


def attach(broker: Broker) -> None:
    """Apply every change of the broker's settings where it takes effect."""
    config, replicas = broker.config, broker.replicas

    def reconfigure(changed: set[str]) -> None:
        if changed & LOG_DEFAULT_SETTINGS or {"log.retention.minutes", "log.retention.hours", "log.roll.hours"} & changed:
            replicas.logs.default_config = config.log_config({})
            metadata = getattr(replicas, "metadata", None)  # None before the logs open
            for topic in list(metadata.topics.values()) if metadata is not None else ():
                replicas.apply_topic_configs(topic)
        if changed & CLEANER_SETTINGS:
            replicas.logs.reconfigure_cleaner(config.cleaner_config())
        if changed & CONNECTION_SETTINGS:
            broker.reconfigure_connection_limits()
        log.info("broker_reconfigured", changed=sorted(changed))

    config.on_change(reconfigure)
