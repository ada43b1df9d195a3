"""What a coordinator handler returns: records to append, then responses to release."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode


class OffsetsRecord(NamedTuple):
    """One `__consumer_offsets` record: encoded key and value (None is a tombstone). A tuple:
    a commit of hundreds of partitions makes one per partition."""

    key: bytes
    value: bytes | None
    # The decoded key and value when the shard built them, so replaying its own committed
    # records need not decode what it just encoded. Always the same content as the bytes.
    decoded: tuple[Any, Any] | None = None


class CommitRecords(list):
    """The records of one OffsetCommit: every one an offset commit of `group` whose `decoded` is
    its `offsets.PackedCommit`. The runtime replays such a write whole
    (`replay_appended_commits`, `replay_commits`): one pass per view, the group looked up once.
    Merged with other records it becomes an ordinary list (replayed record by record)."""

    __slots__ = ("group",)

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group = group

    def __iadd__(self, other: Any) -> list[OffsetsRecord]:  # type: ignore[override, misc]
        return [*self, *other]


@dataclasses.dataclass(slots=True)
class Result:
    """The outcome of one event (a request or a timer) on a coordinator shard.

    A handler never applies what `records` describe: the runtime appends them to the shard's
    partition and replays them into the shard's latest view, and once the high watermark passes
    them into its committed view (replay is the one path by which persisted state changes), and
    only then releases `responses`.
    `responses` maps a request token (chosen by the runtime when it calls the shard) to the
    response for that request: an event can answer requests other than its own (a JoinGroup
    completing a rebalance answers every member waiting in JoinGroup).

    If the append fails or is not committed within offsets.commit.timeout.ms, `on_failure`
    (error code, now) runs as an event on the shard and its Result is released instead; it
    builds error responses and may move transient state (a SyncGroup rebalances again), never
    undoes persisted state (a record that may still commit stays in the latest view; a log that
    failed has the runtime rebuild it). Without it the responses go as they are.
    """

    records: list[OffsetsRecord] = dataclasses.field(default_factory=list)
    responses: dict[int, Any] = dataclasses.field(default_factory=dict)
    on_failure: Callable[[ErrorCode, int], Result] | None = None

    def respond(self, token: int, response: Any) -> Result:
        self.responses[token] = response
        return self

    def merge(self, other: Result) -> Result:
        """Fold another Result of the same event into this one (records in order, and both
        failure paths)."""
        if self.on_failure is not None or other.on_failure is not None:
            mine, theirs = self._failure_path(), other._failure_path()
            self.on_failure = lambda code, now_ms: mine(code, now_ms).merge(theirs(code, now_ms))
        self.records += other.records
        self.responses.update(other.responses)
        return self

    def _failure_path(self) -> Callable[[ErrorCode, int], Result]:
        if self.on_failure is not None:
            return self.on_failure
        responses = dict(self.responses)
        return lambda _code, _now_ms: Result(responses=dict(responses))


def group_append_error(code: ErrorCode) -> ErrorCode:
    """How a failed append of group records reaches the client (Kafka's
    appendGroupMetadataErrorToResponseError): retriable codes where the client should look the
    coordinator up again, UNKNOWN_SERVER_ERROR for a record too large."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return code


def offset_commit_append_error(code: ErrorCode) -> ErrorCode:
    """How a failed append of offset commits reaches the client (Kafka's OffsetCommit error mapping)."""
    if code in (ErrorCode.unknown_topic_or_partition, ErrorCode.not_enough_replicas,
                ErrorCode.not_enough_replicas_after_append):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_record):
        return ErrorCode.invalid_commit_offset_size
    if code is ErrorCode.request_timed_out:
        return code
    return ErrorCode.unknown_server_error
