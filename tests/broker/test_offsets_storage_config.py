"""offsets.storage and zookeeper.connect: refused when inconsistent, as every bad setting is."""

from __future__ import annotations

import pytest

from tidemark.broker.config import BrokerConfig, ConfigError


def test_zookeeper_storage_needs_zookeeper_connect() -> None:
    with pytest.raises(ConfigError, match="offsets.storage=zookeeper needs zookeeper.connect"):
        BrokerConfig({"offsets.storage": "zookeeper"})
    with pytest.raises(ConfigError, match="offsets.storage='redis' is invalid"):
        BrokerConfig({"offsets.storage": "redis"})
    config = BrokerConfig({"offsets.storage": "zookeeper", "zookeeper.connect": "127.0.0.1:2181/kafka"})
    assert (config["offsets.storage"], config["zookeeper.connect"]) == ("zookeeper", "127.0.0.1:2181/kafka")
    assert BrokerConfig()["offsets.storage"] == "kafka"
