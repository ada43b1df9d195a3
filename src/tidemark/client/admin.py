"""confluent-kafka's AdminClient with every wait bounded by one timeout, its failures turned into
one-line ClientErrors, and the answers as plain values (names, (topic, partition) tuples)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaError,
                             KafkaException, TopicPartition)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from tidemark.client.errors import ClientError, GroupNotFound
from tidemark.client.reach import unreachable

TP = tuple[str, int]


def describe_error(exc: BaseException | KafkaError) -> str:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(error, KafkaError):
        return error.str() or error.name()
    return str(error)


def state_name(state: Any) -> str:
    """Kafka's name of a classic group state (PreparingRebalance, Stable, ...)."""
    if isinstance(state, ConsumerGroupState):
        return {
            ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
            ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
            ConsumerGroupState.STABLE: "Stable",
            ConsumerGroupState.DEAD: "Dead",
            ConsumerGroupState.EMPTY: "Empty",
        }.get(state, "Unknown")
    return str(state) if state else "Unknown"


_GROUP_TYPES = {ConsumerGroupType.CLASSIC: "classic", ConsumerGroupType.CONSUMER: "consumer"}


_LOADING = (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
_LIST_RETRY_BACKOFF_S = 0.1


def _is(exc: KafkaException, code: int) -> bool:
    return bool(exc.args) and isinstance(exc.args[0], KafkaError) and exc.args[0].code() == code


class Admin:
    """One cluster's AdminClient; `client_id` names this tool in the broker's logs."""

    def __init__(self, bootstrap: str, timeout_ms: int, extra: dict[str, str], client_id: str = "tidemark-admin"
                 ) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = timeout_ms
        self.timeout_s = timeout_ms / 1000.0
        self.extra = dict(extra)
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "socket.timeout.ms": max(timeout_ms, 10),
            "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            # librdkafka would print its own connection noise to stderr; the tool's one-line error says it.
            "log_level": 0,
            "error_cb": lambda _error: None,
            **extra,
        }
        try:
            self.admin = AdminClient(config)
        except KafkaException as exc:
            raise ClientError(f"Error: invalid client configuration for {bootstrap}: {describe_error(exc)}") from exc

    @property
    def plaintext(self) -> bool:
        return self.extra.get("security.protocol", "plaintext").lower() == "plaintext"

    def check_reachable(self) -> None:
        """Fail at once with one clear line when no bootstrap server accepts a connection. (The admin
        calls that follow carry their own bounded timeouts for anything else going wrong.)"""
        why = unreachable(self.bootstrap, self.timeout_s)
        if why is not None:
            raise ClientError(f"Error: cannot reach bootstrap server {self.bootstrap}: {why}")

    def wait(self, future: Future, what: str) -> Any:
        try:
            return future.result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            raise ClientError(f"Error: {what} failed against {self.bootstrap}: {self.explain(exc)}") from exc
        except TimeoutError as exc:
            raise ClientError(f"Error: {what} timed out after {self.timeout_s:g}s against {self.bootstrap}") from exc

    def explain(self, exc: KafkaException) -> str:
        text = describe_error(exc)
        if _is(exc, KafkaError._TIMED_OUT):
            text += f" (no answer within {self.timeout_s:g}s)"
        return text

    # -- groups ---------------------------------------------------------------------------------

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, state name) of every group, sorted."""
        return [(group, state) for group, state, _type in self.group_listings()]

    def group_listings(self) -> list[tuple[str, str, str | None]]:
        """(group id, state name, group type) of every group, sorted. The type is ListGroups v5's
        ("classic", "consumer"), None from brokers too old to say."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            result = self.wait(self.admin.list_consumer_groups(request_timeout=self.timeout_s), "listing groups")
            # A coordinator still loading its partitions answers a retriable error: Kafka's admin
            # client asks again within its timeout, and librdkafka's does not.
            loading = bool(result.errors) and all(error.code() in _LOADING for error in result.errors)
            if not loading or time.monotonic() >= deadline:
                break
            time.sleep(_LIST_RETRY_BACKOFF_S)
        if result.errors:
            # Kafka's tool fails when any broker could not be listed; do the same, naming the first.
            raise ClientError(f"Error: listing groups failed against {self.bootstrap}: "
                              f"{describe_error(result.errors[0])}")
        return sorted((listing.group_id, state_name(listing.state), _GROUP_TYPES.get(listing.type))
                      for listing in result.valid)

    def _description(self, group: str) -> ConsumerGroupDescription | None:
        """None for a group the coordinator does not know."""
        futures = self.admin.describe_consumer_groups([group], request_timeout=self.timeout_s)
        try:
            return futures[group].result(timeout=self.timeout_s + 1.0)
        except KafkaException as exc:
            if _is(exc, KafkaError.GROUP_ID_NOT_FOUND):
                return None
            raise ClientError(f"Error: describing group '{group}' failed against {self.bootstrap}: "
                              f"{self.explain(exc)}") from exc
        except TimeoutError as exc:
            raise ClientError(f"Error: describing group '{group}' timed out after {self.timeout_s:g}s "
                              f"against {self.bootstrap}") from exc

    def describe(self, group: str) -> ConsumerGroupDescription:
        description = self._description(group)
        if description is None or (description.state in (ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)
                                   and not description.members):
            raise GroupNotFound(group)
        return description

    def group_state(self, group: str) -> str:
        """The group's state name; "Dead" for a group the coordinator does not know."""
        description = self._description(group)
        return "Dead" if description is None else state_name(description.state)

    def committed(self, group: str) -> dict[TP, int | None]:
        futures = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                         request_timeout=self.timeout_s)
        result = self.wait(futures[group], f"fetching offsets of group '{group}'")
        committed: dict[TP, int | None] = {}
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise ClientError(f"Error: fetching offset of {tp.topic}-{tp.partition} for group '{group}' "
                                  f"failed: {describe_error(tp.error)}")
            committed[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return committed

    def alter_offsets(self, group: str, offsets: dict[TP, int]) -> None:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        result = self.wait(futures[group], f"committing offsets for group '{group}'")
        for tp in result.topic_partitions or []:
            if tp.error is not None:
                raise ClientError(f"Error: committing the offset of {tp.topic}-{tp.partition} for group '{group}' "
                                  f"failed: {describe_error(tp.error)}")

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, str | None]:
        """group -> None when deleted, else the error's name (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, ...)."""
        futures = self.admin.delete_consumer_groups(list(group_ids), request_timeout=self.timeout_s)
        outcome: dict[str, str | None] = {}
        for group in group_ids:
            try:
                futures[group].result(timeout=self.timeout_s + 1.0)
                outcome[group] = None
            except KafkaException as exc:
                if _is(exc, KafkaError._TIMED_OUT):
                    raise ClientError(f"Error: deleting group '{group}' failed against {self.bootstrap}: "
                                      f"{self.explain(exc)}") from exc
                error = exc.args[0] if exc.args else None
                outcome[group] = error.name() if isinstance(error, KafkaError) else str(error)
            except TimeoutError as exc:
                raise ClientError(f"Error: deleting group '{group}' timed out after {self.timeout_s:g}s "
                                  f"against {self.bootstrap}") from exc
        return outcome

    # -- topics and offsets ---------------------------------------------------------------------

    def metadata(self, topic: str | None = None) -> Any:
        try:
            return self.admin.list_topics(topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise ClientError(f"Error: fetching metadata failed against {self.bootstrap}: {self.explain(exc)}") from exc

    def topic_partitions(self) -> dict[str, list[int]]:
        """Every topic the cluster knows, with its partition ids (a Metadata request)."""
        return {name: sorted(topic.partitions) for name, topic in self.metadata().topics.items()
                if topic.error is None}

    def log_end_offsets(self, partitions: Iterable[TP]) -> dict[TP, int | None]:
        """ListOffsets latest (librdkafka sends one request per leader); None where it failed,
        as Kafka's tool shows "-" rather than failing."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in wanted},
                                          request_timeout=self.timeout_s)
        ends: dict[TP, int | None] = {}
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout=self.timeout_s + 1.0).offset
            except (KafkaException, TimeoutError):
                ends[(tp.topic, tp.partition)] = None
        return ends

    def offsets_for(self, partitions: Iterable[TP], spec: OffsetSpec, what: str) -> dict[TP, int]:
        """ListOffsets for every partition with one spec; any partition failing fails the call."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        futures = self.admin.list_offsets({TopicPartition(t, p): spec for t, p in wanted},
                                          request_timeout=self.timeout_s)
        found: dict[TP, int] = {}
        for tp, future in futures.items():
            info = self.wait(future, f"getting the {what} offset of {tp.topic}-{tp.partition}")
            found[(tp.topic, tp.partition)] = info.offset
        return found
