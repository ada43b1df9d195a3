"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs through the admin clients operators
and UIs use (confluent-kafka, kafka-python), their Kafka error codes on the wire, and altered
configs that persist across a crash and apply to the live logs."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka.admin import ConfigResource as PyConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
DAY_MS = 24 * 3600 * 1000


def _describe(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource("topic", topic)
    return admin.describe_configs([resource])[resource].result(10)


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry, validate_only: bool = False) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(10)


def _error(call) -> str:
    with pytest.raises(KafkaException) as info:
        call()
    return info.value.args[0]


@pytest.fixture(scope="module")
def static_broker(tmp_path_factory):
    """A broker with one setting set explicitly (log.segment.bytes), the rest Kafka's defaults."""
    process = BrokerProcess(tmp_path_factory.mktemp("configs") / "data", {"log.segment.bytes": "2048"}).start()
    yield process
    process.kill()


def test_describe_topic_configs_with_kafka_sources(static_broker):
    admin = AdminClient({"bootstrap.servers": static_broker.bootstrap})
    admin.create_topics([NewTopic("described", 1, 1, config={"retention.ms": "60000"})])["described"].result(10)
    configs = _describe(admin, "described")
    assert {"cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "max.message.bytes",
            "min.insync.replicas", "min.cleanable.dirty.ratio"} <= set(configs)
    retention = configs["retention.ms"]
    assert (retention.value, retention.source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert not retention.is_read_only and not retention.is_sensitive
    # The topic falls back to the broker's explicit setting, then to Kafka's default.
    assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == ("2048", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == ("delete", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["min.cleanable.dirty.ratio"].value == "0.5"
    assert configs["segment.ms"].value == "604800000"

    # librdkafka asks for synonyms: every place the value could come from, highest first.
    synonyms = [(s.name, s.value, s.source) for s in retention.synonyms.values()]
    assert synonyms == [("retention.ms", "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value),
                        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG.value)]

    python_admin = KafkaAdminClient(bootstrap_servers=static_broker.bootstrap)
    try:
        described = python_admin.describe_configs([PyConfigResource(ConfigResourceType.TOPIC, "described")],
                                                  config_filter="all")
    finally:
        python_admin.close()
    assert described["topic"]["described"]["retention.ms"]["value"] == "60000"


def test_describe_broker_configs_sources_and_read_only(static_broker):
    admin = AdminClient({"bootstrap.servers": static_broker.bootstrap})
    resource = ConfigResource("broker", "0")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert (configs["log.segment.bytes"].value, configs["log.segment.bytes"].source) == (
        "2048", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert (configs["num.partitions"].value, configs["num.partitions"].source) == ("1", ConfigSource.DEFAULT_CONFIG.value)
    # Read-only unless Kafka updates the setting dynamically (and tidemark does).
    assert configs["num.partitions"].is_read_only and configs["log.cleaner.enable"].is_read_only
    assert not configs["log.retention.ms"].is_read_only and not configs["max.connections"].is_read_only
    # Changing a read-only one is refused as Kafka refuses a setting it cannot update dynamically.
    altered = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.cleaner.enable", "false", incremental_operation=AlterConfigOpType.SET)])
    error = _error(lambda: admin.incremental_alter_configs([altered])[altered].result(10))
    assert error.code() == ErrorCode.invalid_request
    assert error.str() == "Cannot update these configs dynamically: Set(log.cleaner.enable)"


def test_incremental_and_legacy_alter(static_broker):
    admin = AdminClient({"bootstrap.servers": static_broker.bootstrap})
    admin.create_topics([NewTopic("altered", 1, 1, config={"retention.ms": "60000", "segment.bytes": "4096"})])[
        "altered"].result(10)

    _incremental(admin, "altered", ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET),
                 validate_only=True)
    assert _describe(admin, "altered")["retention.ms"].value == "60000"  # validate_only changes nothing

    _incremental(admin, "altered",
                 ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
                 ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
                 ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET))
    configs = _describe(admin, "altered")
    assert (configs["cleanup.policy"].value, configs["cleanup.policy"].source) == (
        "delete,compact", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    assert configs["max.message.bytes"].value == "2000"
    assert configs["segment.bytes"].value == "4096"  # untouched
    _incremental(admin, "altered", ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert _describe(admin, "altered")["cleanup.policy"].value == "compact"

    # Kafka's errors and messages for values the topic could not be created with either.
    bad = ConfigEntry("segment.bytes", "1", incremental_operation=AlterConfigOpType.SET)
    error = _error(lambda: _incremental(admin, "altered", bad))
    assert error.code() == ErrorCode.invalid_config
    assert error.str() == "Invalid value 1 for configuration segment.bytes: Value must be at least 14"
    error = _error(lambda: _incremental(admin, "altered", ConfigEntry(
        "no.such.config", "1", incremental_operation=AlterConfigOpType.SET)))
    assert (error.code(), error.str()) == (ErrorCode.invalid_config, "Unknown topic config name: no.such.config")
    error = _error(lambda: _incremental(admin, "absent", ConfigEntry(
        "retention.ms", "1", incremental_operation=AlterConfigOpType.SET)))
    assert error.code() == ErrorCode.unknown_topic_or_partition

    # AlterConfigs replaces the whole set of overrides: those not named go back to defaults.
    legacy = ConfigResource("topic", "altered", set_config={"retention.bytes": "4096"})
    admin.alter_configs([legacy])[legacy].result(10)
    configs = _describe(admin, "altered")
    assert configs["retention.bytes"].value == "4096"
    overridden = {name for name, entry in configs.items() if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert overridden == {"retention.bytes"}

    python_admin = KafkaAdminClient(bootstrap_servers=static_broker.bootstrap)
    try:
        python_admin.alter_configs([PyConfigResource(ConfigResourceType.TOPIC, "altered", {"retention.ms": "90000"})])
    finally:
        python_admin.close()
    assert _describe(admin, "altered")["retention.ms"].value == "90000"


def _produce_old_batches(client: RawClient, topic: str, count: int) -> None:
    """Records a day old, one batch each: in 1 KiB segments every closed one is past a short retention."""
    for i in range(count):
        batch = build_batch([(None, b"r%03d-" % i + b"x" * 200, (), int(time.time() * 1000) - DAY_MS)])
        assert client.produce(topic, batch).error_code == ErrorCode.none


def _wait_for_earliest_above(client: RawClient, topic: str, offset: int, timeout_s: float = 60.0) -> int:
    """The log start offset once retention has moved it past offset (the timeout only ends a hang)."""
    deadline = time.monotonic() + timeout_s
    while (earliest := client.list_offset(topic, -2).offset) <= offset:
        assert time.monotonic() < deadline, f"log start offset of {topic} never moved past {offset}"
        time.sleep(0.05)
    return earliest


def _active_base(broker, topic: str) -> int:
    return max(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def test_altered_retention_applies_to_the_live_log(make_broker):
    broker = make_broker({"log.retention.check.interval.ms": "100"}).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("live", configs={"segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_old_batches(client, "live", 20)
        assert client.list_offset("live", -2).offset == 0  # a day old is within the default 7 days
        _incremental(admin, "live", ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET))
        assert _wait_for_earliest_above(client, "live", 0) == _active_base(broker, "live")


def test_altered_configs_survive_a_crash_and_apply_at_start(make_broker):
    # Retention cannot run in the first life; the configs must come back from the metadata.
    first = make_broker({"log.retention.check.interval.ms": str(DAY_MS)}).start()
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    with RawClient(first.bootstrap) as client:
        assert client.create_topic("kept", configs={"segment.bytes": "1024"}).error_code == ErrorCode.none
        _produce_old_batches(client, "kept", 20)
    _incremental(admin, "kept", ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET),
                 ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    first.kill()

    broker = make_broker({"log.retention.check.interval.ms": "100"}, data_dir=first.data_dir).start()
    configs = _describe(AdminClient({"bootstrap.servers": broker.bootstrap}), "kept")
    assert (configs["retention.ms"].value, configs["retention.ms"].source) == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert configs["cleanup.policy"].value == "delete,compact"
    with RawClient(broker.bootstrap) as client:
        assert _wait_for_earliest_above(client, "kept", 0) == _active_base(broker, "kept")


# -- the wire: Kafka's error codes ---------------------------------------------------------------

def _describe_raw(client: RawClient, resources: list[tuple[int, str, list[str] | None]], version: int = 4,
                  include_synonyms: bool = False):
    return client.request(DESCRIBE_CONFIGS, version, {"resources": [
        {"resource_type": t, "resource_name": n, "configuration_keys": keys} for t, n, keys in resources],
        "include_synonyms": include_synonyms, "include_documentation": True}).results


def test_describe_configs_on_the_wire(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("wire-described", configs={"cleanup.policy": "compact,delete"}).error_code == 0
        topic, missing, other_broker, not_a_number, defaults, logger, invalid = _describe_raw(client, [
            (TOPIC, "wire-described", ["cleanup.policy", "retention.ms", "no.such.config"]),
            (TOPIC, "absent", None), (BROKER, "7", None), (BROKER, "x", None), (BROKER, "", None),
            (BROKER_LOGGER, "0", None), (TOPIC, "bad/name", None)])
        assert topic.error_code == ErrorCode.none
        assert [(c.name, c.value, c.config_source, c.config_type, c.documentation, c.synonyms) for c in topic.configs] == [
            ("cleanup.policy", "compact,delete", 1, 7, None, ()), ("retention.ms", "604800000", 5, 5, None, ())]
        assert missing.error_code == ErrorCode.unknown_topic_or_partition and missing.configs == ()
        assert other_broker.error_code == ErrorCode.invalid_request
        assert not_a_number.error_code == ErrorCode.invalid_request
        assert (defaults.error_code, defaults.configs) == (ErrorCode.none, ())  # no dynamic cluster default set
        assert logger.error_code == ErrorCode.invalid_request
        assert invalid.error_code == ErrorCode.invalid_topic_exception
        # An empty key list means every config, as null does; v1 has no config types.
        (every,) = _describe_raw(client, [(TOPIC, "wire-described", [])], version=1, include_synonyms=True)
        assert len(every.configs) > 10 and all(c.synonyms for c in every.configs)


def _incremental_raw(client: RawClient, resources: list[tuple[int, str, list[tuple[str, int, str | None]]]],
                     validate_only: bool = False) -> list[tuple[int, str | None]]:
    response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": t, "resource_name": n, "configs": [
            {"name": name, "config_operation": op, "value": value} for name, op, value in configs]}
        for t, n, configs in resources], "validate_only": validate_only})
    return [(r.error_code, r.error_message) for r in response.responses]


def test_alter_configs_errors_on_the_wire(broker):
    with RawClient(broker.bootstrap) as client:
        assert client.create_topic("wire-altered").error_code == 0
        codes = lambda answers: [code for code, _ in answers]  # noqa: E731
        assert _incremental_raw(client, [(TOPIC, "wire-altered", [("retention.ms", APPEND, "5")])]) == [
            (ErrorCode.invalid_config, "Config value append is not allowed for config key: retention.ms")]
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("cleanup.policy", SUBTRACT, "delete")])])) == [
            ErrorCode.invalid_config]  # no policy left
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)])])) == [
            ErrorCode.invalid_request]
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("retention.ms", SET, None)])])) == [
            ErrorCode.invalid_request]
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("retention.ms", SET, "1")])] * 2)) == [
            ErrorCode.invalid_request] * 2
        assert codes(_incremental_raw(client, [(BROKER, "0", [("num.partitions", SET, "3")]),
                                               (BROKER, "7", []), (BROKER_LOGGER, "0", [])])) == [ErrorCode.invalid_request] * 3
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("max.message.bytes", SET, "x")])])) == [
            ErrorCode.invalid_config]
        # Several resources: each answered on its own; validate_only changes nothing.
        assert codes(_incremental_raw(client, [(TOPIC, "wire-altered", [("retention.ms", SET, "1000")]),
                                               (TOPIC, "absent", [("retention.ms", SET, "1000")])], validate_only=True)) == [
            ErrorCode.none, ErrorCode.unknown_topic_or_partition]
        (topic,) = _describe_raw(client, [(TOPIC, "wire-altered", ["retention.ms"])])
        assert topic.configs[0].value == "604800000"
        response = client.request(ALTER_CONFIGS, 2, {"resources": [
            {"resource_type": TOPIC, "resource_name": "wire-altered", "configs": [{"name": "retention.ms", "value": "-5"}]}],
            "validate_only": False})
        assert response.responses[0].error_code == ErrorCode.invalid_config
