"""DescribeConfigs and IncrementalAlterConfigs over the client layer's connection, for what the
AdminClient cannot name: the brokers' cluster-wide default (an empty resource name)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from tidemark.client.connection import Brokers, error_name
from tidemark.client.errors import ClientError
from tidemark.wire.api_keys import ApiKey

BROKER = 4
SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
           4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}
SET, DELETE = 0, 1


def _check(code: ErrorCode, message: str | None, bootstrap: str) -> None:
    if code != ErrorCode.none:
        raise ClientError(f"Error: {message or error_name(code)} ({error_name(code)}) from {bootstrap}")


def describe_broker_default(bootstrap: str, timeout_s: float) -> list[dict[str, Any]]:
    """The entries DescribeConfigs answers for the brokers' default resource, with synonyms."""
    with Brokers(bootstrap, timeout_s) as brokers:
        _version, response = brokers.any().call(ApiKey.DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": BROKER, "resource_name": "", "configuration_keys": None}],
            "include_synonyms": True})
    (result,) = response.results
    _check(result.error_code, result.error_message, bootstrap)
    return [{"name": c.name, "value": c.value, "source": SOURCES.get(int(c.config_source), "UNKNOWN"),
             "sensitive": bool(c.is_sensitive), "read_only": bool(c.read_only),
             "synonyms": [{"source": SOURCES.get(int(s.source), "UNKNOWN"), "name": s.name, "value": s.value}
                          for s in c.synonyms]} for c in result.configs]


def alter_broker_default(bootstrap: str, timeout_s: float, to_set: dict[str, str], to_delete: list[str]) -> None:
    configs = [{"name": k, "config_operation": SET, "value": v} for k, v in to_set.items()]
    configs += [{"name": k, "config_operation": DELETE, "value": None} for k in to_delete]
    with Brokers(bootstrap, timeout_s) as brokers:
        _version, response = brokers.any().call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {
            "resources": [{"resource_type": BROKER, "resource_name": "", "configs": configs}],
            "validate_only": False})
    (result,) = response.responses
    _check(result.error_code, result.error_message, bootstrap)
