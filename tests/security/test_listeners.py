"""listeners, advertised.listeners and listener.security.protocol.map under Kafka's rules: several
listeners on one broker, each answering Metadata and FindCoordinator with its own advertised
address (as Kafka answers with the listener the request came in on)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import free_port
from tests.security.conftest import ListenersBroker, RawClient, stop
from tidemark.broker.config import BrokerConfig, ConfigError
from tidemark.broker.security import listeners
from tidemark.wire.api_keys import ApiKey


def _resolve(settings: dict[str, str]) -> list[listeners.Listener]:
    return listeners.resolve(BrokerConfig(settings))


def test_each_protocol_named_after_itself_needs_no_map_entry():
    resolved = _resolve({"listeners": "PLAINTEXT://:9092,SSL://127.0.0.1:9093,SASL_PLAINTEXT://h:9094,"
                                      "SASL_SSL://[::1]:9095",
                         "ssl.keystore.location": "unused-here"})
    assert [(l.name, l.protocol, l.host, l.port) for l in resolved] == [
        ("PLAINTEXT", "PLAINTEXT", "", 9092), ("SSL", "SSL", "127.0.0.1", 9093),
        ("SASL_PLAINTEXT", "SASL_PLAINTEXT", "h", 9094), ("SASL_SSL", "SASL_SSL", "::1", 9095)]
    assert [(l.sasl, l.tls) for l in resolved] == [(False, False), (False, True), (True, False), (True, True)]


def test_custom_names_take_their_protocol_from_the_map():
    resolved = _resolve({"listeners": "INTERNAL://127.0.0.1:1,external://127.0.0.1:2",
                         "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
                         "advertised.listeners": "EXTERNAL://kafka.example:443"})
    assert [(l.name, l.protocol) for l in resolved] == [("INTERNAL", "PLAINTEXT"), ("EXTERNAL", "SASL_PLAINTEXT")]
    assert resolved[0].advertised is None
    assert (resolved[1].advertised.host, resolved[1].advertised.port) == ("kafka.example", 443)


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "INTERNAL://:1"}, "INTERNAL has no entry in listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "PLAINTEXT appears twice"),
    ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://a:1"}, "SSL, which is not in listeners"),
    ({"listeners": "PLAINTEXT://:1,SASL_SSL://:2", "inter.broker.listener.name": "SASL_SSL",
      "zookeeper.connect": "zk:2181"}, "needs tidemark.inter.broker.sasl.username"),
    ({"listeners": "SSL://:2", "zookeeper.connect": "zk:2181"}, "PLAINTEXT is not"),
])
def test_listeners_that_disagree_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        _resolve(settings)


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "PLAINTEXT://host"}, "expected NAME://host:port"),
    ({"listener.security.protocol.map": "A:TLS"}, "PROTOCOL one of"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "tidemark serves PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
    ({"connections.max.reauth.ms": "1000"}, "at most 0"),
    ({"ssl.client.auth": "always"}, "none, requested or required"),
])
def test_malformed_settings_are_refused_naming_the_setting(settings, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig(settings)


def test_listen_and_listeners_together_are_refused(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", "127.0.0.1:0",
                             "--data-dir", str(tmp_path), "--set", "listeners=PLAINTEXT://127.0.0.1:0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "either --listen or the listeners setting" in result.stderr


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory: pytest.TempPathFactory):
    external = free_port()  # advertised only (a proxy's port): nobody listens there
    broker = ListenersBroker(tmp_path_factory.mktemp("listeners") / "data",
                             {"INTERNAL": "PLAINTEXT", "EXTERNAL": "PLAINTEXT"},
                             {"advertised.listeners": f"EXTERNAL://localhost:{external}"}).start()
    broker.external = external
    yield broker
    stop(broker)


def test_metadata_and_find_coordinator_answer_the_listener_the_request_came_in_on(two_listeners):
    internal = RawClient(two_listeners.address("INTERNAL"))
    external = RawClient(two_listeners.address("EXTERNAL"))
    for client, expected in ((internal, ("127.0.0.1", two_listeners.ports["INTERNAL"])),
                             (external, ("localhost", two_listeners.external))):
        brokers = client.request(ApiKey.METADATA, 9, {"topics": None, "allow_auto_topic_creation": False,
                                        "include_cluster_authorized_operations": False,
                                        "include_topic_authorized_operations": False}).brokers
        assert [(b.host, b.port) for b in brokers] == [expected]
        coordinator = client.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
        assert (coordinator.error_code, coordinator.host, coordinator.port) == (0, *expected)
        cluster = client.request(ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        assert [(b.host, b.port) for b in cluster.brokers] == [expected]
    internal.close()
    external.close()


def test_describe_configs_never_shows_key_material_or_passwords():
    from tidemark.broker.config_entries import broker_entries

    config = BrokerConfig({"ssl.keystore.key": "-----BEGIN PRIVATE KEY-----secret", "ssl.key.password": "pw",
                           "tidemark.inter.broker.sasl.password": "broker-pw",
                           "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"})
    entries = {e["name"]: e for e in broker_entries(config, include_synonyms=True)}
    for name in ("ssl.keystore.key", "ssl.key.password", "tidemark.inter.broker.sasl.password"):
        assert (entries[name]["value"], entries[name]["is_sensitive"]) == (None, True)
        assert all(s["value"] is None for s in entries[name]["synonyms"])
    assert "secret" not in repr(entries) and "broker-pw" not in repr(entries)
    assert entries["sasl.enabled.mechanisms"]["value"] == "PLAIN,SCRAM-SHA-512"
