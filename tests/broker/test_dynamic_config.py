"""Dynamic broker settings on one broker: the precedence of their layers, Kafka's refusals, what
DescribeConfigs shows, and that each change takes effect at once where it applies (retention of
existing topics, the size of a produced batch, connection caps, the running cleaner) and
survives a restart. Brokers run in the test's event loop and are spoken to on the wire."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from kio.schema.errors import ErrorCode

from tests.broker.inprocess import running_broker, until
from tests.integration.raw import AsyncRawClient
from tidemark.broker import dynamic_config
from tidemark.broker.config import DYNAMIC_BROKER, DYNAMIC_DEFAULT, BrokerConfig
from tidemark.broker.dynamic_config import DynamicConfigRefused
from tidemark.log import log_cleaner
from tidemark.hold import HOLD_AT, HOLD_RELEASE
from tidemark.records.batch import build_batch

PRODUCE, METADATA, CREATE_TOPICS, DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 0, 3, 19, 32, 44
BROKER = 4
SET, DELETE = 0, 1
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5
HANG_GUARD_S = 60


def _run(scenario) -> None:
    asyncio.run(asyncio.wait_for(scenario, timeout=HANG_GUARD_S))


# -- the layers, without a broker ---------------------------------------------------------------

def test_per_broker_outranks_the_cluster_default_which_outranks_the_static_setting():
    config = BrokerConfig({"message.max.bytes": "2000"})
    seen: list[set[str]] = []
    config.on_change(seen.append)
    config.set_dynamic(DYNAMIC_DEFAULT, {"message.max.bytes": 3000})
    assert config["message.max.bytes"] == 3000 and config.source("message.max.bytes") == DYNAMIC_DEFAULT
    config.set_dynamic(DYNAMIC_BROKER, {"message.max.bytes": 4000})
    assert config["message.max.bytes"] == 4000 and config.source("message.max.bytes") == DYNAMIC_BROKER
    config.set_dynamic(DYNAMIC_BROKER, {})
    assert config["message.max.bytes"] == 3000
    config.set_dynamic(DYNAMIC_DEFAULT, {})
    assert config["message.max.bytes"] == 2000 and config.source("message.max.bytes") == "static"
    assert seen == [{"message.max.bytes"}] * 4
    assert config.log_config({}).max_message_bytes == 2000


def test_a_dynamic_retention_ms_outranks_static_retention_hours():
    """Kafka's synonyms: log.retention.ms set anywhere wins over .minutes and .hours, even when
    its value is its default's: the change is reported."""
    config = BrokerConfig({"log.retention.hours": "1"})
    assert config.log_config({}).retention_ms == 3_600_000
    assert config.set_dynamic(DYNAMIC_DEFAULT, {"log.retention.ms": 604800000}) == {"log.retention.ms"}
    assert config.log_config({}).retention_ms == 604800000


def test_read_only_unknown_and_invalid_settings_are_refused_with_kafkas_errors():
    with pytest.raises(DynamicConfigRefused) as refused:
        dynamic_config.parse({"num.partitions": "3", "log.cleaner.enable": "false", "log.retention.ms": "1"})
    assert (refused.value.code, refused.value.message) == (
        ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.cleaner.enable, num.partitions)")
    with pytest.raises(DynamicConfigRefused) as refused:
        dynamic_config.parse({"no.such.setting": "1"})
    assert refused.value.code == ErrorCode.invalid_request
    for raw, message in [
        ({"max.connections": "-5"}, "Invalid value -5 for configuration max.connections: Value must be at least 0"),
        ({"log.retention.ms": "soon"}, "Invalid value soon for configuration log.retention.ms: Not a number of type LONG"),
        ({"num.io.threads": "0"}, "Invalid value 0 for configuration num.io.threads: Value must be at least 1"),
    ]:
        with pytest.raises(DynamicConfigRefused) as refused:
            dynamic_config.parse(raw)
        assert (refused.value.code, refused.value.message) == (ErrorCode.invalid_config, message)
    # Kafka's dynamic settings tidemark only keeps are accepted.
    assert dynamic_config.parse({"num.network.threads": "4", "num.io.threads": "16"}) == {
        "num.network.threads": "4", "num.io.threads": "16"}


# -- on the wire --------------------------------------------------------------------------------

async def _alter(client: AsyncRawClient, name: str, ops: list[tuple[str, int, str | None]],
                 validate_only: bool = False) -> tuple[int, str | None]:
    response = await client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": BROKER, "resource_name": name, "configs": [
            {"name": n, "config_operation": op, "value": v} for n, op, v in ops]}], "validate_only": validate_only})
    (result,) = response.responses
    return result.error_code, result.error_message


async def _describe(client: AsyncRawClient, resource_type: int, name: str, keys: list[str] | None) -> Any:
    response = await client.request(DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": False})
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    return {c.name: c for c in result.configs}


async def _create_topic(client: AsyncRawClient, name: str, configs: dict[str, str] | None = None) -> None:
    response = await client.request(CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 1,
        "replication_factor": 1, "assignments": [],
        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10000, "validate_only": False})
    assert response.topics[0].error_code == ErrorCode.none


async def _produce(client: AsyncRawClient, topic: str, records: list[tuple[bytes | None, bytes]]) -> int:
    now = int(time.time() * 1000)
    batch = build_batch([(key, value, (), now) for key, value in records])
    response = await client.request(PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    return response.responses[0].partition_responses[0].error_code


def test_describe_shows_each_layer_as_kafka_does(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path, {"log.retention.hours": "1"}) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await _create_topic(client, "orders")
            assert await _alter(client, "", [("log.retention.ms", SET, "60000")]) == (ErrorCode.none, None)
            assert await _alter(client, "0", [("log.retention.ms", SET, "30000")]) == (ErrorCode.none, None)
            retention = (await _describe(client, BROKER, "0", ["log.retention.ms"]))["log.retention.ms"]
            assert (retention.value, retention.config_source, retention.read_only) == ("30000", DYNAMIC_BROKER_CONFIG, False)
            assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
                ("log.retention.ms", "30000", DYNAMIC_BROKER_CONFIG),
                ("log.retention.ms", "60000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                ("log.retention.hours", "1", STATIC_BROKER_CONFIG),
                ("log.retention.hours", "168", DEFAULT_CONFIG)]
            # The cluster default resource: only what is set there, without this broker's layer.
            defaults = await _describe(client, BROKER, "", None)
            assert list(defaults) == ["log.retention.ms"]
            assert (defaults["log.retention.ms"].value, defaults["log.retention.ms"].config_source) == (
                "60000", DYNAMIC_DEFAULT_BROKER_CONFIG)
            assert [s.source for s in defaults["log.retention.ms"].synonyms] == [
                DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG]
            # A topic without its own retention.ms falls back to this broker's dynamic value.
            topic = (await _describe(client, 2, "orders", ["retention.ms"]))["retention.ms"]
            assert (topic.value, topic.config_source) == ("30000", DYNAMIC_BROKER_CONFIG)
            # Read-only settings are marked so; a refused change changes nothing.
            enable = (await _describe(client, BROKER, "0", ["log.cleaner.enable"]))["log.cleaner.enable"]
            assert enable.read_only
            assert await _alter(client, "0", [("log.cleaner.enable", SET, "false"), ("log.retention.ms", SET, "1")]) == (
                ErrorCode.invalid_request, "Cannot update these configs dynamically: Set(log.cleaner.enable)")
            assert await _alter(client, "0", [("log.retention.ms", SET, "1")], validate_only=True) == (ErrorCode.none, None)
            assert await _alter(client, "0", [("max.connections.per.ip", SET, "0")]) == (
                ErrorCode.invalid_config, "max.connections.per.ip=0 needs max.connections.per.ip.overrides")
            assert broker.config["log.retention.ms"] == 30000
            # DELETE falls back to the next layer.
            assert await _alter(client, "0", [("log.retention.ms", DELETE, None)]) == (ErrorCode.none, None)
            assert broker.config.log_config({}).retention_ms == 60000
            await client.close()

    _run(scenario())


def test_a_retention_default_reaches_existing_topics_without_their_own(tmp_path):
    """Kafka's log config reload: the retention loop deletes by the new default at its next run,
    except in a topic that overrides it."""
    async def scenario() -> None:
        async with running_broker(tmp_path, {"log.segment.bytes": "300"}) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await _create_topic(client, "follows")
            await _create_topic(client, "keeps", {"retention.bytes": "-1"})
            for topic in ("follows", "keeps"):
                for i in range(4):  # one batch a segment
                    assert await _produce(client, topic, [(None, bytes([i]) * 150)]) == ErrorCode.none
            logs = {t: broker.replicas.partition(t, 0).log for t in ("follows", "keeps")}
            assert all(len(log.segments) >= 4 for log in logs.values())
            broker.replicas.logs.enforce_retention()
            assert [log.log_start_offset for log in logs.values()] == [0, 0]

            assert await _alter(client, "", [("log.retention.bytes", SET, "0")]) == (ErrorCode.none, None)
            broker.replicas.logs.enforce_retention()
            assert logs["follows"].log_start_offset == 3  # all but the active segment
            assert logs["keeps"].log_start_offset == 0
            await client.close()

    _run(scenario())


def test_message_max_bytes_applies_to_the_next_produce(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await _create_topic(client, "orders")
            assert await _produce(client, "orders", [(None, b"x" * 2000)]) == ErrorCode.none
            assert await _alter(client, "0", [("message.max.bytes", SET, "1000")]) == (ErrorCode.none, None)
            assert await _produce(client, "orders", [(None, b"x" * 2000)]) == ErrorCode.message_too_large
            assert await _produce(client, "orders", [(None, b"x" * 100)]) == ErrorCode.none
            assert broker.replicas.partition("orders", 0).log.log_end_offset == 2
            await client.close()

    _run(scenario())


def test_producer_id_expiration_applies_to_producers_already_known(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await _create_topic(client, "orders")
            now = int(time.time() * 1000)
            batch = build_batch([(None, b"v", (), now)], producer_id=broker.replicas.metadata.next_producer_id(),
                                producer_epoch=0, base_sequence=0)
            response = await client.request(PRODUCE, 9, {"acks": -1, "timeout": 10000, "topic_data": [
                {"name": "orders", "partition_data": [{"index": 0, "records": batch}]}]})
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert broker.replicas.logs.remove_expired_producers(now + 60_000) == 0  # a day by default
            assert await _alter(client, "", [("producer.id.expiration.ms", SET, "1000")]) == (ErrorCode.none, None)
            assert broker.replicas.logs.remove_expired_producers(now + 60_000) == 1
            await client.close()

    _run(scenario())


async def _admitted(port: int) -> bool:
    """Whether a new connection is served (answers a Metadata request) rather than closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = AsyncRawClient(reader, writer)
    try:
        response = await client.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                       "include_topic_authorized_operations": False})
        return response.brokers[0].node_id == 0
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    finally:
        writer.close()


def test_connection_caps_apply_to_the_next_connection(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            assert await _alter(client, "0", [("max.connections", SET, "1")]) == (ErrorCode.none, None)
            assert not await _admitted(broker.port)  # this test's own connection is the one
            assert await _alter(client, "0", [("max.connections", DELETE, None),
                                              ("max.connections.per.ip.overrides", SET, "127.0.0.1:1")]) == (
                ErrorCode.none, None)
            assert not await _admitted(broker.port)
            assert await _alter(client, "", [("max.connections.per.ip", SET, "2")]) == (ErrorCode.none, None)
            assert not await _admitted(broker.port)  # the override outranks the per-ip cap
            assert await _alter(client, "0", [("max.connections.per.ip.overrides", DELETE, None)]) == (
                ErrorCode.none, None)
            await until(lambda: len(broker.connections) == 1)  # the refused ones are gone
            assert await _admitted(broker.port)
            await client.close()

    _run(scenario())


def test_the_running_cleaner_takes_a_new_back_off_and_rate(tmp_path):
    """The cleaner sleeps an hour between passes: a shorter back-off wakes it, and its worker
    process throttles to the new rate (the worker's throttle itself: tests/log/test_cleaner_worker.py)."""
    async def scenario() -> None:
        settings = {"log.cleaner.backoff.ms": "3600000", "log.segment.bytes": "300"}
        async with running_broker(tmp_path, settings) as broker:
            client = await AsyncRawClient.connect(broker.port)
            await _create_topic(client, "compacted", {"cleanup.policy": "compact"})
            for value in range(6):
                assert await _produce(client, "compacted", [(b"k", bytes([value]) * 100)]) == ErrorCode.none
            cleaner = broker.replicas.logs.cleaner
            cleaned = log_cleaner.SEGMENTS_CLEANED._value.get()

            assert await _alter(client, "", [("log.cleaner.backoff.ms", SET, "10"),
                                             ("log.cleaner.io.max.bytes.per.second", SET, "1000000000.0")]) == (
                ErrorCode.none, None)
            await until(lambda: log_cleaner.SEGMENTS_CLEANED._value.get() > cleaned)
            assert cleaner.workers[0].rate.value == 1e9
            await client.close()

    _run(scenario())


def test_more_cleaner_threads_clean_more_logs_at_once(tmp_path, monkeypatch):
    """One cleaner task's worker is held inside its cleaning (a hold point); a second thread set
    dynamically cleans the other dirty log meanwhile. Kafka's bounds on a resize hold."""
    release = tmp_path / "release"
    monkeypatch.setenv(HOLD_AT, "cleaner_write")  # inherited by the workers
    monkeypatch.setenv(HOLD_RELEASE, str(release))

    async def scenario() -> None:
        settings = {"log.cleaner.backoff.ms": "3600000", "log.segment.bytes": "300"}
        async with running_broker(tmp_path, settings) as broker:
            client = await AsyncRawClient.connect(broker.port)
            for topic in ("first", "second"):
                await _create_topic(client, topic, {"cleanup.policy": "compact"})
                for value in range(6):
                    assert await _produce(client, topic, [(b"k", bytes([value]) * 100)]) == ErrorCode.none
            cleaner = broker.replicas.logs.cleaner
            assert await _alter(client, "0", [("log.cleaner.threads", SET, "3")]) == (
                ErrorCode.invalid_config, "Log cleaner threads cannot be increased to more than double the current value 1")
            assert await _alter(client, "", [("log.cleaner.backoff.ms", SET, "10")]) == (ErrorCode.none, None)
            await until(lambda: len(cleaner.manager.in_progress) == 1)
            assert await _alter(client, "0", [("log.cleaner.threads", SET, "2")]) == (ErrorCode.none, None)
            await until(lambda: len(cleaner.manager.in_progress) == 2)  # both logs at once
            cleaned = log_cleaner.SEGMENTS_CLEANED._value.get()
            release.touch()
            await until(lambda: not cleaner.manager.in_progress and log_cleaner.SEGMENTS_CLEANED._value.get() > cleaned)
            assert await _alter(client, "0", [("log.cleaner.threads", SET, "1")]) == (ErrorCode.none, None)
            await until(lambda: len(cleaner._tasks) == 1)  # the surplus task ends
            await client.close()

    try:
        _run(scenario())
    finally:
        release.touch()


def test_dynamic_settings_survive_a_restart(tmp_path):
    async def scenario() -> None:
        async with running_broker(tmp_path) as broker:
            client = await AsyncRawClient.connect(broker.port)
            assert await _alter(client, "", [("message.max.bytes", SET, "1000"), ("log.retention.ms", SET, "5000")]) \
                == (ErrorCode.none, None)
            assert await _alter(client, "0", [("message.max.bytes", SET, "1500")]) == (ErrorCode.none, None)
            await client.close()
        async with running_broker(tmp_path) as broker:
            assert broker.config["message.max.bytes"] == 1500
            assert broker.config.dynamic(DYNAMIC_DEFAULT) == {"message.max.bytes": 1000, "log.retention.ms": 5000}
            assert broker.replicas.logs.default_config.retention_ms == 5000

    _run(scenario())


def test_stored_settings_a_broker_cannot_use_are_left_out_at_start(tmp_path):
    """Written by another broker or version: a read-only name, a bad value, a layer that does
    not go with the others are logged and skipped; the broker starts with the rest."""
    async def scenario() -> None:
        async with running_broker(tmp_path):
            pass
        path = tmp_path / "tidemark-metadata.json"
        state = json.loads(path.read_text())
        state["broker_configs"] = {
            "<default>": {"log.cleaner.enable": "false", "max.connections": "x", "message.max.bytes": "1000"},
            "0": {"max.connections.per.ip": "0"}}  # refuses every address: not taken
        path.write_text(json.dumps(state))
        async with running_broker(tmp_path) as broker:
            assert broker.config.dynamic(DYNAMIC_DEFAULT) == {"message.max.bytes": 1000}
            assert broker.config.dynamic(DYNAMIC_BROKER) == {}
            assert await _admitted(broker.port)

    _run(scenario())


# -- confluent-kafka, a broker process ------------------------------------------------------------

def test_confluent_kafka_alters_and_describes_broker_settings(make_broker, tmp_path: Path):
    """librdkafka cannot name the cluster default (an empty resource name): the tests above
    reach it on the wire."""
    broker = make_broker({"log.retention.hours": "2"}).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    own = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("message.max.bytes", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("log.retention.ms", "90000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([own])[own].result(30)

    described = ConfigResource("broker", "0")
    configs = admin.describe_configs([described])[described].result(30)
    assert (configs["message.max.bytes"].value, configs["message.max.bytes"].source) == (
        "1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].source) == (
        "90000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # (confluent-kafka keys synonyms by name: the wire test above sees each of them)
    assert [(s.name, s.source) for s in configs["log.retention.ms"].synonyms.values()][0] == (
        "log.retention.ms", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not configs["max.connections"].is_read_only and configs["num.partitions"].is_read_only

    refused = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("zookeeper.connect", "elsewhere:2181", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([refused])[refused].result(30)
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST

    # The next produce is held to the new limit, also after a crash and a restart.
    broker.kill()
    broker.start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 100000})
    outcome: list[KafkaError | None] = []
    producer.produce("sized", b"x" * 5000, on_delivery=lambda error, _message: outcome.append(error))
    assert producer.flush(30) == 0
    assert outcome[0] is not None and outcome[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
