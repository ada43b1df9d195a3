"""Kafka's ZooKeeper-era znodes: their paths and their JSON, byte for byte as Kafka writes them.

Key order follows what a Kafka 2.8+/3.x broker puts in ZooKeeper (its maps are hash maps, so
the order is Kafka's observable output, not a design choice), so ZooKeeper-era tools
(kafka-topics.sh --zookeeper, zookeeper-shell, Kafka Manager) read our znodes unchanged.
JSON is compact (no spaces) and UTF-8, as Jackson writes it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

# -- paths -------------------------------------------------------------------------------------

BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
CONFIG_TOPICS = "/config/topics"
# Kafka's dynamic broker settings: /config/brokers/N for broker N, /config/brokers/<default> for
# the cluster-wide defaults (the admin APIs' broker resource "").
CONFIG_BROKERS = "/config/brokers"
DEFAULT_BROKER_ENTITY = "<default>"
# Kafka's ConfigEntityChangeNotificationZNode: a sequential config_change_NNNNNNNNNN per change
# of an entity's config, which every broker watches (topic configs are not read otherwise).
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
# Kafka's client quotas: /config/users/<user>[/clients/<client-id>], /config/clients/<client-id>.
CONFIG = "/config"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
# tidemark's own request znode (Kafka used the ControlledShutdown API, key 7, which Kafka 4's
# message definitions and so kio no longer have): a broker creates /admin/controlled_shutdown/N
# (ephemeral), the controller moves N's leaderships away and deletes the znode.
CONTROLLED_SHUTDOWN = "/admin/controlled_shutdown"
# Kafka's PreferredReplicaElectionZNode: the partitions whose preferred replica should lead; the
# controller acts on it and deletes it (one request at a time).
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"

# The persistent parents a Kafka cluster has (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, ISR_CHANGE_NOTIFICATION, CONTROLLED_SHUTDOWN)

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
INITIAL_LEADER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH = 0  # /controller_epoch as first created; the first controller makes it 1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(entity: str) -> str:
    """`entity`: a broker id, or DEFAULT_BROKER_ENTITY."""
    return f"{CONFIG_BROKERS}/{entity}"


def config_change_path(sequence: str = "") -> str:
    """Without a sequence: the prefix a sequential create completes."""
    return f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{sequence}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def isr_change_path(sequence: str = "") -> str:
    """Without a sequence: the prefix a sequential create completes."""
    return f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}{sequence}"


def controlled_shutdown_path(broker_id: int) -> str:
    return f"{CONTROLLED_SHUTDOWN}/{broker_id}"


# -- JSON --------------------------------------------------------------------------------------


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def now_ms() -> int:
    return int(time.time() * 1000)


def topic_id_to_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: url-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def topic_id_from_string(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


# /brokers/ids/N ------------------------------------------------------------------------------

BROKER_REGISTRATION_VERSION = 5


@dataclasses.dataclass(frozen=True)
class BrokerInfo:
    """A broker's registration: host and port are the PLAINTEXT listener's (Kafka's legacy
    fields), endpoints every listener's advertised NAME://host:port, protocol_map their security
    protocols (listener_security_protocol_map)."""

    id: int
    host: str
    port: int
    rack: str | None = None
    timestamp_ms: int = 0
    jmx_port: int = -1
    endpoints: tuple[str, ...] = ()
    protocol_map: tuple[tuple[str, str], ...] = ()

    @property
    def listener(self) -> str:
        return f"PLAINTEXT://{self.host}:{self.port}"

    def address(self, listener: str) -> tuple[str, int] | None:
        """The (host, port) this broker advertises on the named listener; without endpoints
        (an old registration) its host and port."""
        if not self.endpoints:
            return (self.host, self.port) if listener == "PLAINTEXT" else None
        for endpoint in self.endpoints:
            name, _, address = endpoint.partition("://")
            if name.upper() == listener.upper():
                host, _, port = address.rpartition(":")
                return host.strip("[]"), int(port)
        return None


def encode_broker(broker: BrokerInfo) -> bytes:
    """Version 5, as Kafka 2.7+ registers; "rack" only when set (Kafka omits it otherwise)."""
    value: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": dict(broker.protocol_map) or {"PLAINTEXT": "PLAINTEXT"},
        "endpoints": list(broker.endpoints or (broker.listener,)),
        "jmx_port": broker.jmx_port,
        "port": broker.port,
        "host": broker.host,
    }
    if broker.rack is not None:
        value["rack"] = broker.rack
    value["version"] = BROKER_REGISTRATION_VERSION
    value["timestamp"] = str(broker.timestamp_ms or now_ms())
    return _dumps(value)


def decode_broker(broker_id: int, data: bytes) -> BrokerInfo:
    """Any version Kafka wrote (1..5): host and port from the PLAINTEXT endpoint when listed."""
    value = _loads(data)
    endpoints = tuple(value.get("endpoints") or ())
    host, port = value.get("host"), value.get("port", -1)
    protocol_map = value.get("listener_security_protocol_map") or {}
    for endpoint in endpoints:
        listener, _, address = endpoint.partition("://")
        protocol = protocol_map.get(listener, listener)
        if protocol == "PLAINTEXT":
            host, _, port_text = address.rpartition(":")
            port = int(port_text)
            break
    return BrokerInfo(id=broker_id, host=host or "", port=int(port), rack=value.get("rack"),
                      timestamp_ms=int(value.get("timestamp", 0)), jmx_port=int(value.get("jmx_port", -1)),
                      endpoints=endpoints, protocol_map=tuple(sorted(protocol_map.items())))


# /brokers/topics/T ---------------------------------------------------------------------------

TOPIC_ZNODE_VERSION = 3  # Kafka 2.8+ (version 3 carries topic_id)


@dataclasses.dataclass(frozen=True)
class TopicAssignment:
    """The replica assignment of a topic: partition -> replicas, the first the preferred leader."""

    partitions: Mapping[int, tuple[int, ...]]
    topic_id: uuid.UUID | None = None


def encode_topic(assignment: TopicAssignment) -> bytes:
    value: dict[str, Any] = {
        "partitions": {str(p): list(r) for p, r in sorted(assignment.partitions.items())},
    }
    if assignment.topic_id is not None:
        value["topic_id"] = topic_id_to_string(assignment.topic_id)
    value["adding_replicas"] = {}
    value["removing_replicas"] = {}
    value["version"] = TOPIC_ZNODE_VERSION
    return _dumps(value)


def decode_topic(data: bytes) -> TopicAssignment:
    """Versions 1..3 (topic_id absent before 2.8)."""
    value = _loads(data)
    topic_id = value.get("topic_id")
    return TopicAssignment(
        partitions={int(p): tuple(r) for p, r in sorted((value.get("partitions") or {}).items(), key=lambda i: int(i[0]))},
        topic_id=topic_id_from_string(topic_id) if topic_id else None,
    )


# /brokers/topics/T/partitions/P/state ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PartitionState:
    """Kafka's LeaderIsrAndControllerEpoch; zk_version is the state znode's stat version (-1
    when not read from ZooKeeper), the compare-and-set token of every leader/ISR write."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = -1
    # The zxid of the write that made this content (the znode's mzxid; -1 when not read from
    # ZooKeeper): compared with a broker's registration czxid (its broker epoch, KIP-380), it
    # tells whether the state was written after that broker (re)registered.
    mzxid: int = dataclasses.field(default=-1, compare=False)

    @property
    def online(self) -> bool:
        return self.leader != NO_LEADER


def encode_partition_state(state: PartitionState) -> bytes:
    return _dumps({"controller_epoch": state.controller_epoch, "leader": state.leader, "version": 1,
                   "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def decode_partition_state(data: bytes, zk_version: int = -1, mzxid: int = -1) -> PartitionState:
    value = _loads(data)
    return PartitionState(leader=int(value["leader"]), leader_epoch=int(value["leader_epoch"]),
                          isr=tuple(value["isr"]), controller_epoch=int(value["controller_epoch"]),
                          zk_version=zk_version, mzxid=mzxid)


# /controller, /controller_epoch ---------------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int | None = None) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms or now_ms())})


def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode("ascii"))


# /config/topics/T and /config/brokers/<id or <default>> (the same JSON) ----------------------


def encode_topic_config(configs: Mapping[str, str]) -> bytes:
    """Kafka stores topic overrides as strings (java.util.Properties)."""
    return _dumps({"version": 1, "config": {k: str(v) for k, v in configs.items()}})


def decode_topic_config(data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    return {k: str(v) for k, v in (_loads(data).get("config") or {}).items()}


# /config/changes/config_change_<seq> -----------------------------------------------------------

CONFIG_CHANGE_VERSION = 2  # Kafka 2.0+: {"version":2,"entity_path":"topics/T"}


def encode_topic_config_change(topic: str) -> bytes:
    return _dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": f"topics/{topic}"})


def encode_entity_config_change(entity_path: str) -> bytes:
    """Any entity's notice: "users/alice/clients/app", "clients/<default>" (client quotas)."""
    return _dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": entity_path})


def encode_broker_config_change(entity: str) -> bytes:
    """{"version":2,"entity_path":"brokers/<default>"} or "brokers/1"."""
    return _dumps({"version": CONFIG_CHANGE_VERSION, "entity_path": f"brokers/{entity}"})


def decode_config_change(data: bytes) -> tuple[str, str]:
    """(entity type, entity name), e.g. ("topics", "orders"), from version 1 or 2 notices."""
    value = _loads(data)
    if int(value.get("version", 1)) == 1:
        return str(value["entity_type"]), str(value["entity_name"])
    entity_type, _, name = str(value["entity_path"]).partition("/")
    return entity_type, name


# /isr_change_notification/isr_change_<seq> ----------------------------------------------------


def _encode_partition_list(partitions: Sequence[tuple[str, int]]) -> bytes:
    """{"version":1,"partitions":[{"topic":T,"partition":P},...]}: ISR change notices and
    preferred replica elections alike."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def _decode_partition_list(data: bytes) -> list[tuple[str, int]]:
    return [(item["topic"], int(item["partition"])) for item in _loads(data)["partitions"]]


encode_isr_change = _encode_partition_list
decode_isr_change = _decode_partition_list


# /admin/preferred_replica_election ------------------------------------------------------------


encode_preferred_replica_election = _encode_partition_list
decode_preferred_replica_election = _decode_partition_list
