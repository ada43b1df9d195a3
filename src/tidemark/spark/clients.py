"""Quiet confluent-kafka clients for the Spark sources, sink and jobs.

librdkafka prints its own log lines to stderr (every failed connect, every retry): a job against
an unreachable server printed hundreds of them. Its lines go to the `tidemark.spark.kafka`
logger instead, which prints nothing unless the application configures logging; failures still
reach the caller as exceptions and errors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

LOGGER = logging.getLogger("tidemark.spark.kafka")
LOGGER.addHandler(logging.NullHandler())  # no "last resort" printing to stderr when unconfigured


def quiet(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with librdkafka's log routed to LOGGER (a `logger` the user gave wins)."""
    return {"logger": LOGGER, **config}


class AuthenticationError(RuntimeError):
    """The cluster refused the client's credentials (SASL) or its TLS handshake failed."""


def check_authentication(config: Mapping[str, Any], timeout_s: float = 30.0) -> None:
    """On a secured connection (security.protocol other than plaintext), fail at once with the
    cluster's reason when it refuses the credentials or the TLS handshake fails, as Kafka's Java
    client does. librdkafka only hands that to error_cb and its blocking calls wait out their
    timeouts, so one asynchronous request is made here and its client polled until it answers
    or a refusal is reported. Anything else (an unreachable cluster) is left to the calls that
    follow, with their own errors."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    if str(config.get("security.protocol", "plaintext")).lower() == "plaintext":
        return
    errors: list[Any] = []
    admin = AdminClient({**quiet(config), "error_cb": errors.append})
    answer = admin.describe_cluster(request_timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while not answer.done() and time.monotonic() < deadline:
        admin.poll(0.05)
        refused = next((e for e in errors if e.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL)), None)
        if refused is not None:
            raise AuthenticationError(f"{config.get('bootstrap.servers')} refused the connection: {refused.str()}")
        if any(e.code() == KafkaError._ALL_BROKERS_DOWN for e in errors):
            return  # not a refusal: the calls that follow report it
