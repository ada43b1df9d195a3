"""The client-resource settings under Kafka's names, defaults and validation."""

from __future__ import annotations

import pytest

from tidemark.broker.config import BrokerConfig, ConfigError


def test_defaults_are_kafkas():
    config = BrokerConfig()
    assert config["max.connections"] == config["max.connections.per.ip"] == 2**31 - 1
    assert config["max.connections.per.ip.overrides"] == {}
    assert config["fetch.max.bytes"] == 57671680


def test_overrides_parse_host_count_pairs():
    config = BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.2:5, localhost:0"})
    assert config["max.connections.per.ip.overrides"] == {"127.0.0.2": 5, "localhost": 0}


@pytest.mark.parametrize("name,value", [
    ("max.connections", "-1"), ("max.connections.per.ip", "-1"), ("fetch.max.bytes", "-1"),
    ("max.connections.per.ip.overrides", "127.0.0.1"), ("max.connections.per.ip.overrides", "h:x"),
    ("max.connections.per.ip", "0"),  # refusing every address needs an override
])
def test_invalid_values_are_refused_naming_the_setting(name, value):
    with pytest.raises(ConfigError, match=name):
        BrokerConfig({name: value})
