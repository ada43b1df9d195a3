"""Quiet confluent-kafka clients for the Spark sources, sink and jobs.

librdkafka prints its own log lines to stderr (every failed connect, every retry): a job against
an unreachable server printed hundreds of them. Its lines go to the `tidemark.spark.kafka`
logger instead, which prints nothing unless the application configures logging; failures still
reach the caller as exceptions and errors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

LOGGER = logging.getLogger("tidemark.spark.kafka")
LOGGER.addHandler(logging.NullHandler())  # no "last resort" printing to stderr when unconfigured


def quiet(config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` with librdkafka's log routed to LOGGER (a `logger` the user gave wins)."""
    return {"logger": LOGGER, **config}
