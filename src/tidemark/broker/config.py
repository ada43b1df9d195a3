"""Broker settings under Kafka's names, from defaults, a server.properties file and overrides.

Unknown or malformed settings are refused at start with a message naming the setting, because a
typo that silently falls back to a default is the worst kind of configuration bug.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tidemark.broker.security import listeners
from tidemark.log.config import CleanerConfig, LogConfig

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# Kafka's lower bound on segment.bytes (LegacyRecord.RECORD_OVERHEAD_V0; Kafka 4 raised it to
# 1 MiB). The upper bound is Kafka's too (an INT setting): positions in a segment's offset
# index are 32-bit.
MIN_SEGMENT_BYTES = 14


class ConfigError(ValueError):
    """A setting is unknown or its value is invalid."""


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _parse_int(text: str) -> int:
    return int(text.strip())


def _parse_cleanup_policy(text: str) -> str:
    policies = [part.strip() for part in text.split(",") if part.strip()]
    if not policies or any(p not in ("delete", "compact") for p in policies):
        raise ValueError("String must be one of: compact, delete")
    return ",".join(policies)


def _parse_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: `host:count` pairs, comma separated."""
    overrides: dict[str, int] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        host, sep, count = entry.rpartition(":")
        if not sep or not host.strip() or not count.strip().isdigit():
            raise ValueError(f"expected host:count entries, got {entry!r}")
        overrides[host.strip()] = int(count)
    return overrides


def _parse_optional(text: str) -> str | None:
    return text.strip() or None


def _parse_listener_name(text: str) -> str | None:
    return text.strip().upper() or None


def _parse_security_protocol(text: str) -> str:
    if text.strip().upper() not in listeners.PROTOCOLS:
        raise ValueError(f"expected one of {', '.join(listeners.PROTOCOLS)}")
    return text.strip().upper()


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _parse_sasl_mechanism(text: str) -> str:
    if text.strip().upper() not in SASL_MECHANISMS:
        raise ValueError(f"tidemark serves {', '.join(SASL_MECHANISMS)}")
    return text.strip().upper()


def _parse_sasl_mechanisms(text: str) -> tuple[str, ...]:
    return tuple(_parse_sasl_mechanism(m) for m in text.split(",") if m.strip())


def _parse_pem_type(text: str) -> str:
    if text.strip().upper() != "PEM":
        raise ValueError("tidemark reads PEM material only (JKS and PKCS12 are Java's)")
    return "PEM"


def _parse_client_auth(text: str) -> str:
    if text.strip().lower() not in ("none", "requested", "required"):
        raise ValueError("expected none, requested or required")
    return text.strip().lower()


# Settings a listener may override as listener.name.<name>.<setting> (Kafka's listener prefix).
LISTENER_SETTINGS = ("sasl.enabled.mechanisms", "ssl.client.auth", "ssl.keystore.location",
                     "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.key.password",
                     "ssl.truststore.location", "ssl.truststore.certificates")


def _listener_setting(name: str) -> Setting | None:
    prefix, _, rest = name.partition("listener.name.")
    listener, _, key = rest.partition(".")
    if prefix or not listener or key not in LISTENER_SETTINGS:
        return None
    return dataclasses.replace(BROKER_SETTINGS[key], name=name)


# Kafka's PASSWORD settings: never shown (DescribeConfigs answers them as sensitive, value null).
SENSITIVE_SETTINGS = frozenset({"ssl.keystore.key", "ssl.key.password", "ssl.keystore.certificate.chain",
                                "ssl.truststore.certificates", "tidemark.inter.broker.sasl.password"})


def listener_value(config: BrokerConfig, listener: str, key: str) -> Any:
    """A setting as the named listener sees it: its listener.name.<name>. override, else the broker's."""
    name = f"listener.name.{listener.lower()}.{key}"
    return config[name] if config.is_set(name) else config[key]


def _parse_assignors(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in ("uniform", "range")]
    if not names or unknown:
        raise ValueError("expected a list of uniform and range")
    return names


def _parse_migration_policy(text: str) -> str:
    if text.strip().lower() not in ("bidirectional", "upgrade", "downgrade", "disabled"):
        raise ValueError("expected bidirectional, upgrade, downgrade or disabled")
    return text.strip().lower()


def _parse_offsets_storage(text: str) -> str:
    if text.strip() not in ("kafka", "zookeeper"):
        raise ValueError("expected kafka or zookeeper")
    return text.strip()


def _parse_timestamp_type(text: str) -> str:
    if text.strip() not in ("CreateTime", "LogAppendTime"):
        raise ValueError("String must be one of: CreateTime, LogAppendTime")
    return text.strip()


def _parse_rack(text: str) -> str | None:
    return text.strip() or None


# The selectors Kafka ships (org.apache.kafka.common.replica); tidemark has no plug-in classes.
REPLICA_SELECTORS = ("org.apache.kafka.common.replica.LeaderSelector",
                     "org.apache.kafka.common.replica.RackAwareReplicaSelector")


def _parse_replica_selector(text: str) -> str | None:
    name = text.strip()
    if name and name not in REPLICA_SELECTORS:
        raise ValueError(f"expected one of {', '.join(REPLICA_SELECTORS)}")
    return name or None


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    parse: Callable[[str], Any]
    minimum: int | None = None
    doc: str = ""
    maximum: int | None = None


def _parse_authorizer(text: str) -> str:
    """authorizer.class.name: empty (no authorization) or Kafka's ACL authorizer's name."""
    from tidemark.broker.security.authorizer import AUTHORIZER_NAMES
    name = text.strip()
    if name and name not in AUTHORIZER_NAMES:
        raise ValueError(f"expected empty or kafka.security.authorizer.AclAuthorizer, got {name!r}")
    return name


def _parse_super_users(text: str) -> frozenset[str]:
    """super.users: principals separated by semicolons (User:alice;User:bob)."""
    users = frozenset(part.strip() for part in text.split(";") if part.strip())
    if any(":" not in user for user in users):
        raise ValueError("expected principals as TYPE:NAME separated by ';'")
    return users


def _int(name: str, default: int, minimum: int | None = None, doc: str = "", maximum: int | None = None) -> Setting:
    return Setting(name, default, _parse_int, minimum, doc, maximum)


def _parse_ratio(text: str) -> float:
    value = float(text.strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError("expected a ratio between 0 and 1")
    return value


def _parse_rate(text: str) -> float:
    value = float(text.strip())
    if value <= 0:
        raise ValueError("expected a positive number of bytes per second")
    return value


# Broker-level settings tidemark understands, with Kafka's defaults.
BROKER_SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _int("node.id", 0, 0),
        _int("broker.id", 0, 0, "alias of node.id"),
        _int("num.partitions", 1, 1),
        # Partitions this broker hosts at most (each is a directory and open files): CreateTopics
        # and CreatePartitions beyond it are refused with INVALID_PARTITIONS.
        _int("tidemark.max.partitions", 10000, 1),
        _int("default.replication.factor", 1, 1),
        _int("min.insync.replicas", 1, 1),
        Setting("auto.create.topics.enable", True, _parse_bool),
        Setting("delete.topic.enable", True, _parse_bool),
        _int("log.segment.bytes", 1073741824, MIN_SEGMENT_BYTES, maximum=INT_MAX),
        _int("log.roll.ms", 604800000, 1),
        _int("log.roll.hours", 168, 1),
        _int("log.retention.ms", 604800000, -1),
        _int("log.retention.minutes", 10080, -1),
        _int("log.retention.hours", 168, -1),
        _int("log.retention.bytes", -1, -1),
        _int("log.retention.check.interval.ms", 300000, 1),
        _int("log.index.interval.bytes", 4096, 0),
        _int("log.index.size.max.bytes", 10485760, 4),
        _int("log.flush.interval.messages", LONG_MAX, 1),
        _int("log.flush.interval.ms", LONG_MAX, 0),
        Setting("log.cleanup.policy", "delete", _parse_cleanup_policy),
        Setting("log.message.timestamp.type", "CreateTime", _parse_timestamp_type),
        _int("socket.request.max.bytes", 104857600, 1),
        # The address registered in ZooKeeper and answered in Metadata and FindCoordinator, when
        # clients and other brokers must reach this one elsewhere than where it listens (NAT, a
        # proxy). Unset: the listener (--listen, with the port bound when 0 was asked).
        Setting("advertised.listeners", None, listeners.check_advertised_listeners),
        # Listeners and authentication (broker/security/): Kafka's names and, where tidemark
        # serves them, Kafka's defaults. `listeners` unset: serve --listen's one PLAINTEXT listener.
        Setting("listeners", None, listeners.check_listeners),
        Setting("listener.security.protocol.map", listeners.parse_protocol_map(listeners.DEFAULT_PROTOCOL_MAP),
                listeners.check_protocol_map),
        Setting("inter.broker.listener.name", None, _parse_listener_name),
        Setting("security.inter.broker.protocol", "PLAINTEXT", _parse_security_protocol),
        # Kafka's default is GSSAPI, which tidemark does not serve.
        Setting("sasl.enabled.mechanisms", ("SCRAM-SHA-256", "SCRAM-SHA-512"), _parse_sasl_mechanisms),
        Setting("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512", _parse_sasl_mechanism),
        # tidemark: the inter-broker SASL credentials (Kafka reads them from a JAAS login module).
        Setting("tidemark.inter.broker.sasl.username", None, _parse_optional),
        Setting("tidemark.inter.broker.sasl.password", None, _parse_optional),
        _int("connection.failed.authentication.delay.ms", 100, 0),
        _int("connections.max.reauth.ms", 0, 0, maximum=0),  # re-authentication is not served
        Setting("ssl.keystore.type", "PEM", _parse_pem_type),
        Setting("ssl.keystore.location", None, _parse_optional),
        Setting("ssl.keystore.certificate.chain", None, _parse_optional),
        Setting("ssl.keystore.key", None, _parse_optional),
        Setting("ssl.key.password", None, _parse_optional),
        Setting("ssl.truststore.type", "PEM", _parse_pem_type),
        Setting("ssl.truststore.location", None, _parse_optional),
        Setting("ssl.truststore.certificates", None, _parse_optional),
        Setting("ssl.client.auth", "none", _parse_client_auth),
        # Client resources: connections (per broker and per client address) and fetch size.
        _int("max.connections", INT_MAX, 0),
        _int("max.connections.per.ip", INT_MAX, 0),
        Setting("max.connections.per.ip.overrides", {}, _parse_ip_overrides),
        _int("fetch.max.bytes", 57671680, 0),
        _int("message.max.bytes", 1048588, 0),
        _int("replica.fetch.max.bytes", 1048576, 0),
        # Replication (a cluster: zookeeper.connect set).
        _int("replica.lag.time.max.ms", 30000, 1),
        _int("replica.fetch.wait.max.ms", 500, 0),
        _int("replica.fetch.backoff.ms", 1000, 0),
        _int("replica.high.watermark.checkpoint.interval.ms", 5000, 1),
        # tidemark: appends to a partition replicated in sync (a follower's, or a leader's while a
        # follower is in its ISR) are fsynced within this long, not one by one: they count toward
        # the high watermark once appended, as in Kafka (durability across brokers is replication).
        _int("tidemark.replica.flush.interval.ms", 1000, 0),
        # tidemark: how many logs a group-commit round fsyncs at once (1: one after another).
        _int("tidemark.log.flush.threads", 8, 1, maximum=64),
        Setting("unclean.leader.election.enable", False, _parse_bool),
        # Racks (KIP-36, KIP-392): this broker's rack, registered in ZooKeeper and shown in
        # Metadata; rack-aware replica assignment; the leader's choice of a replica for a
        # consumer to read from (none: always the leader).
        Setting("broker.rack", None, _parse_rack),
        Setting("replica.selector.class", None, _parse_replica_selector),
        _int("controlled.shutdown.timeout.ms", 30000, 0, "how long SIGTERM waits for the controller"),
        _int("request.timeout.ms", 30000, 0),
        # Idempotent producer state (ProducerStateManager).
        _int("producer.id.expiration.ms", 86400000, 1),
        _int("producer.id.expiration.check.interval.ms", 600000, 1),
        # The offsets topic and the offset manager (Kafka's defaults).
        _int("offsets.topic.num.partitions", 50, 1),
        _int("offsets.topic.replication.factor", 3, 1),
        _int("offsets.topic.segment.bytes", 104857600, 1, maximum=INT_MAX),  # Kafka's bounds
        _int("offsets.topic.compression.codec", 0, 0),
        _int("offsets.retention.minutes", 10080, 1),
        _int("offsets.retention.check.interval.ms", 600000, 1),
        _int("offsets.commit.timeout.ms", 5000, 1),
        # -1: a commit is answered once every in-sync replica has it, and refused while fewer
        # than min.insync.replicas are in sync (Kafka's bound: at least -1).
        _int("offsets.commit.required.acks", -1, -1),
        # tidemark's own: a broker that does not coordinate a group forwards its OffsetFetch to
        # the coordinator instead of answering NOT_COORDINATOR (broker/offset_fetch_forwarding.py).
        Setting("offsets.fetch.forward.enable", False, _parse_bool),
        _int("offsets.load.buffer.size", 5242880, 1),
        # tidemark: followers of an offsets partition replay it into a warm standby coordinator
        Setting("offsets.standby.replay.enable", True, _parse_bool),
        _int("offset.metadata.max.bytes", 4096, 0),
        # Where OffsetCommit/OffsetFetch keep offsets: the offsets topic, or ZooKeeper's znodes
        # (OffsetCommit v0-1 and OffsetFetch v0 are served, from ZooKeeper, when it is set).
        Setting("offsets.storage", "kafka", _parse_offsets_storage),
        Setting("zookeeper.connect", "", str.strip),
        _int("zookeeper.session.timeout.ms", 18000, 1),
        # The log cleaner (compaction of cleanup.policy=compact topics).
        Setting("log.cleaner.enable", True, _parse_bool),
        _int("log.cleaner.backoff.ms", 15000, 0),
        _int("log.cleaner.threads", 1, 0),  # 0: Kafka's bound, and no cleaning
        Setting("log.cleaner.min.cleanable.ratio", 0.5, _parse_ratio),
        _int("log.cleaner.delete.retention.ms", 86400000, 0),
        Setting("log.cleaner.io.max.bytes.per.second", float("inf"), _parse_rate),
        _int("log.cleaner.min.compaction.lag.ms", 0, 0),
        # Consumer groups.
        _int("group.min.session.timeout.ms", 6000, 0),
        _int("group.max.session.timeout.ms", 1800000, 0),
        _int("group.initial.rebalance.delay.ms", 3000, 0),
        _int("group.max.size", INT_MAX, 1),
        # The transaction coordinator and __transaction_state (Kafka's names and defaults; a
        # cluster creates the topic with min(replication factor, brokers) refused below it, as
        # the offsets topic, and min.insync.replicas from transaction.state.log.min.isr).
        _int("transaction.state.log.num.partitions", 50, 1),
        _int("transaction.state.log.replication.factor", 3, 1),
        _int("transaction.state.log.min.isr", 2, 1),
        _int("transaction.state.log.segment.bytes", 104857600, 1, maximum=INT_MAX),
        _int("transaction.state.log.load.buffer.size", 5242880, 1),
        _int("transaction.max.timeout.ms", 900000, 1),
        _int("transactional.id.expiration.ms", 604800000, 1),
        _int("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10000, 1),
        _int("transaction.remove.expired.transaction.cleanup.interval.ms", 3600000, 1),
        # How long an add of partitions or offsets that finds the id's previous transaction still
        # completing waits for it on the broker before answering CONCURRENT_TRANSACTIONS (Kafka's
        # server-side retry of KAFKA-18654; not longer than request.timeout.ms).
        _int("add.partitions.to.txn.retry.backoff.max.ms", 100, 0),
        # Authorization (Kafka's AclAuthorizer): ACLs enforced once an authorizer is named.
        Setting("authorizer.class.name", "", _parse_authorizer),
        Setting("super.users", frozenset(), _parse_super_users),
        Setting("allow.everyone.if.no.acl.found", False, _parse_bool),
        # KIP-848 consumer groups (group.protocol=consumer), with Kafka's defaults and bounds.
        _int("group.consumer.session.timeout.ms", 45000, 1),
        _int("group.consumer.min.session.timeout.ms", 45000, 1),
        _int("group.consumer.max.session.timeout.ms", 60000, 1),
        _int("group.consumer.heartbeat.interval.ms", 5000, 1),
        _int("group.consumer.min.heartbeat.interval.ms", 5000, 1),
        _int("group.consumer.max.heartbeat.interval.ms", 15000, 1),
        _int("group.consumer.max.size", INT_MAX, 1),
        Setting("group.consumer.assignors", ("uniform", "range"), _parse_assignors),
        Setting("group.consumer.migration.policy", "bidirectional", _parse_migration_policy),
        # Client quotas (broker/quotas/): usage is sampled over quota.window.num windows of
        # quota.window.size.seconds (Kafka's defaults).
        _int("quota.window.num", 11, 1),
        _int("quota.window.size.seconds", 1, 1),
        # tidemark's own (Kafka has no lag export): consumer lag on the Prometheus endpoint.
        Setting("tidemark.lag.metrics.enable", True, _parse_bool),
        _int("tidemark.lag.metrics.max.series", 10000, 0),
    )
}

# Topic-level settings tidemark acts on: topic name -> (broker setting giving the default,
# LogConfig field it sets, or None when the broker reads it elsewhere).
TOPIC_SETTINGS: dict[str, tuple[str, str | None]] = {
    "cleanup.policy": ("log.cleanup.policy", "cleanup_policy"),
    "segment.bytes": ("log.segment.bytes", "segment_bytes"),
    "segment.ms": ("log.roll.ms", "segment_ms"),
    "retention.ms": ("log.retention.ms", "retention_ms"),
    "retention.bytes": ("log.retention.bytes", "retention_bytes"),
    "index.interval.bytes": ("log.index.interval.bytes", "index_interval_bytes"),
    "segment.index.bytes": ("log.index.size.max.bytes", "segment_index_bytes"),
    "max.message.bytes": ("message.max.bytes", "max_message_bytes"),
    "message.timestamp.type": ("log.message.timestamp.type", "message_timestamp_type"),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms", "delete_retention_ms"),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio", "min_cleanable_dirty_ratio"),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms", "min_compaction_lag_ms"),
    "flush.messages": ("log.flush.interval.messages", None),
    "flush.ms": ("log.flush.interval.ms", None),
    "min.insync.replicas": ("min.insync.replicas", None),  # kept for replication (acks=all)
}

# Kafka's type of each topic-level setting (DescribeConfigs reports it; parse errors name it).
TOPIC_CONFIG_TYPES: dict[str, str] = {
    "cleanup.policy": "LIST", "segment.bytes": "INT", "segment.ms": "LONG", "retention.ms": "LONG",
    "retention.bytes": "LONG", "index.interval.bytes": "INT", "segment.index.bytes": "INT",
    "max.message.bytes": "INT", "message.timestamp.type": "STRING", "delete.retention.ms": "LONG",
    "min.cleanable.dirty.ratio": "DOUBLE", "min.compaction.lag.ms": "LONG", "flush.messages": "LONG",
    "flush.ms": "LONG", "min.insync.replicas": "INT", "compression.type": "STRING",
    "file.delete.delay.ms": "LONG", "follower.replication.throttled.replicas": "LIST",
    "leader.replication.throttled.replicas": "LIST", "local.retention.bytes": "LONG",
    "local.retention.ms": "LONG", "max.compaction.lag.ms": "LONG", "message.downconversion.enable": "BOOLEAN",
    "message.format.version": "STRING", "message.timestamp.after.max.ms": "LONG",
    "message.timestamp.before.max.ms": "LONG", "message.timestamp.difference.max.ms": "LONG",
    "preallocate": "BOOLEAN", "remote.storage.enable": "BOOLEAN", "segment.jitter.ms": "LONG",
    "unclean.leader.election.enable": "BOOLEAN",
}

# Kafka's other topic-level settings: accepted and kept with the topic (admin tools, Streams
# and Connect send them), not acted on by a single broker.
STORED_TOPIC_SETTINGS = frozenset({
    "compression.type", "file.delete.delay.ms",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms",
    "preallocate",
    "remote.storage.enable", "segment.jitter.ms", "unclean.leader.election.enable",
})


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java .properties text: `key=value` or `key: value` lines, # and ! comments."""
    result: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separator = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if separator <= 0:
            raise ConfigError(f"line {number}: expected key=value, got {raw!r}")
        result[line[:separator].strip()] = line[separator + 1 :].strip()
    return result


def _parse_setting(setting: Setting, raw: str, where: str) -> Any:
    try:
        value = setting.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}{setting.name}={raw!r} is invalid: {exc}") from None
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(f"{where}{setting.name}={raw!r} is invalid: must be at least {setting.minimum}")
    if setting.maximum is not None and value > setting.maximum:
        raise ConfigError(f"{where}{setting.name}={raw!r} is invalid: must be at most {setting.maximum}")
    return value


# Where a broker setting's value comes from, highest precedence first (Kafka's ConfigSource):
# this broker's dynamic settings, the cluster-wide dynamic defaults, server.properties/--set.
DYNAMIC_BROKER = "dynamic-broker"
DYNAMIC_DEFAULT = "dynamic-default"
STATIC = "static"
LAYERS = (DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC)


class BrokerConfig:
    """Resolved broker settings. Read them by Kafka name: `config["num.partitions"]`.

    A value comes from the first layer holding it: this broker's dynamic settings, the
    cluster-wide dynamic defaults, the static ones (server.properties, --set), Kafka's default.
    The dynamic layers change while the broker runs (broker/dynamic_config.py); listeners
    registered with `on_change` are told which settings' values changed."""

    def __init__(self, overrides: Mapping[str, str] | None = None, *, source: str = "") -> None:
        self._layers: dict[str, dict[str, Any]] = {layer: {} for layer in LAYERS}
        self._listeners: list[Callable[[set[str]], None]] = []
        where = f"{source}: " if source else ""
        for name, raw in (overrides or {}).items():
            setting = BROKER_SETTINGS.get(name) or _listener_setting(name)
            if setting is None:
                raise ConfigError(f"{where}unknown setting {name!r}")
            self._layers[STATIC][name] = _parse_setting(setting, raw, where)
        self._values = self._resolve(self._layers)
        _check_combination(self._values, where)
        if self["unclean.leader.election.enable"]:
            raise ConfigError(f"{where}unclean.leader.election.enable=true is not supported: tidemark elects "
                              "leaders from the in-sync replicas only (acknowledged writes are never lost)")
        for name in ("session.timeout.ms", "heartbeat.interval.ms"):  # Kafka's startup checks
            low, high = self[f"group.consumer.min.{name}"], self[f"group.consumer.max.{name}"]
            if not low <= self[f"group.consumer.{name}"] <= high:
                raise ConfigError(f"{where}group.consumer.{name} must be between group.consumer.min.{name} "
                                  f"({low}) and group.consumer.max.{name} ({high})")
        if self["group.consumer.heartbeat.interval.ms"] >= self["group.consumer.session.timeout.ms"]:
            raise ConfigError(f"{where}group.consumer.heartbeat.interval.ms must be less than "
                              "group.consumer.session.timeout.ms")
        if self["offsets.storage"] == "zookeeper" and not self["zookeeper.connect"]:
            raise ConfigError(f"{where}offsets.storage=zookeeper needs zookeeper.connect")

    @staticmethod
    def _resolve(layers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        values = {name: s.default for name, s in BROKER_SETTINGS.items()}
        for layer in reversed(LAYERS):  # lowest precedence first: later layers win
            values.update(layers[layer])
        return values

    def check_dynamic(self, layer: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """The settings `values` (parsed) would give as the whole of a dynamic layer; ConfigError
        if they do not go together (Kafka validates the merged config the same way)."""
        resolved = self._resolve({**self._layers, layer: dict(values)})
        _check_combination(resolved, "")
        return resolved

    def set_dynamic(self, layer: str, values: Mapping[str, Any]) -> set[str]:
        """Replace a dynamic layer with `values` (parsed, checked); tell the listeners which
        settings' values changed, and return them."""
        assert layer in (DYNAMIC_BROKER, DYNAMIC_DEFAULT)
        self.check_dynamic(layer, values)
        before = {name: (self._values[name], self.source(name)) for name in BROKER_SETTINGS}
        self._layers[layer] = dict(values)
        self._values = self._resolve(self._layers)
        # A synonym newly set (or unset) changes which one wins even when its value stays equal.
        changed = {name for name in BROKER_SETTINGS if before[name] != (self._values[name], self.source(name))}
        if changed:
            for listener in list(self._listeners):
                listener(changed)
        return changed

    def dynamic(self, layer: str) -> dict[str, Any]:
        return dict(self._layers[layer])

    def on_change(self, listener: Callable[[set[str]], None]) -> None:
        self._listeners.append(listener)

    def source(self, name: str) -> str | None:
        """The layer the value comes from (None: Kafka's default)."""
        return next((layer for layer in LAYERS if name in self._layers[layer]), None)

    def holds(self, layer: str, name: str) -> bool:
        return name in self._layers[layer]

    def layer_value(self, layer: str, name: str) -> Any:
        return self._layers[layer][name]

    @classmethod
    def load(cls, properties_file: Path | None = None, sets: Iterable[str] = ()) -> BrokerConfig:
        """Defaults, then the properties file, then each `key=value` of `sets` (later wins)."""
        merged: dict[str, str] = {}
        if properties_file is not None:
            merged.update(parse_properties(properties_file.read_text()))
        for item in sets:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"--set {item!r}: expected key=value")
            merged[key.strip()] = value.strip()
        return cls(merged)

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def is_set(self, name: str) -> bool:
        """Set anywhere (static or dynamic): Kafka's precedence among synonyms looks at all."""
        return self.source(name) is not None

    @property
    def node_id(self) -> int:
        return self["broker.id"] if self.is_set("broker.id") and not self.is_set("node.id") else self["node.id"]

    @property
    def retention_ms(self) -> int:
        """Kafka's precedence: log.retention.ms, then .minutes, then .hours."""
        if self.is_set("log.retention.ms"):
            return self["log.retention.ms"]
        if self.is_set("log.retention.minutes"):
            return _minutes_to_ms(self["log.retention.minutes"])
        return _minutes_to_ms(self["log.retention.hours"] * 60 if self["log.retention.hours"] >= 0 else -1)

    @property
    def roll_ms(self) -> int:
        if self.is_set("log.roll.ms") or not self.is_set("log.roll.hours"):
            return self["log.roll.ms"]
        return self["log.roll.hours"] * 3600 * 1000

    def topic_defaults(self) -> dict[str, Any]:
        """Topic-level settings' broker defaults, keyed by the topic-level name."""
        defaults = {name: self[broker_name] for name, (broker_name, _) in TOPIC_SETTINGS.items()}
        defaults["retention.ms"] = self.retention_ms
        defaults["segment.ms"] = self.roll_ms
        return defaults

    def min_insync_replicas(self, topic_configs: Mapping[str, Any]) -> int:
        """A topic's min.insync.replicas: its own override, else the broker's."""
        return int(topic_configs.get("min.insync.replicas", self["min.insync.replicas"]))

    def cleaner_config(self) -> CleanerConfig:
        return CleanerConfig(enable=self["log.cleaner.enable"], backoff_ms=self["log.cleaner.backoff.ms"],
                             io_max_bytes_per_second=self["log.cleaner.io.max.bytes.per.second"],
                             threads=self["log.cleaner.threads"])

    def log_config(self, topic_configs: Mapping[str, Any]) -> LogConfig:
        """The LogConfig of a topic: its own overrides over the broker's defaults."""
        effective = {**self.topic_defaults(), **topic_configs}
        return LogConfig(**{field: effective[name] for name, (_, field) in TOPIC_SETTINGS.items() if field},
                         producer_id_expiration_ms=self["producer.id.expiration.ms"])


def _check_combination(values: Mapping[str, Any], where: str) -> None:
    if values["max.connections.per.ip"] == 0 and not values["max.connections.per.ip.overrides"]:
        # As Kafka: refusing every address needs at least one override to let someone in.
        raise ConfigError(f"{where}max.connections.per.ip=0 needs max.connections.per.ip.overrides")


def parse_setting(name: str, raw: str, type_name: str) -> Any:
    """One broker setting's value from its text, with Kafka's INVALID_CONFIG messages
    (`type_name`: Kafka's type of the setting, which they name)."""
    setting = BROKER_SETTINGS[name]
    try:
        value = setting.parse(raw)
    except ValueError as exc:
        reason = f"Not a number of type {type_name}" if setting.parse is _parse_int else exc
        raise ConfigError(f"Invalid value {raw} for configuration {name}: {reason}") from None
    if setting.minimum is not None and value < setting.minimum:
        raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be at least {setting.minimum}")
    if setting.maximum is not None and value > setting.maximum:
        raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be no more than {setting.maximum}")
    return value


def _minutes_to_ms(minutes: int) -> int:
    return -1 if minutes < 0 else minutes * 60 * 1000


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse topic-level overrides (CreateTopics, AlterConfigs); raise ConfigError with Kafka's
    message for the first bad one."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        if raw is None:
            continue
        if name in STORED_TOPIC_SETTINGS:
            parsed[name] = raw
            continue
        if name not in TOPIC_SETTINGS:
            raise ConfigError(f"Unknown topic config name: {name}")
        setting = BROKER_SETTINGS[TOPIC_SETTINGS[name][0]]
        try:
            value = setting.parse(raw)
        except ValueError as exc:
            reason = f"Not a number of type {TOPIC_CONFIG_TYPES[name]}" if setting.parse is _parse_int else exc
            raise ConfigError(f"Invalid value {raw} for configuration {name}: {reason}") from None
        if setting.minimum is not None and value < setting.minimum:
            raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be at least {setting.minimum}")
        if setting.maximum is not None and value > setting.maximum:
            raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be no more than {setting.maximum}")
        parsed[name] = value
    return parsed
