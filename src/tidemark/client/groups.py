"""Many groups at once over the client layer's connections: each group's coordinator found with
one FindCoordinator (v4+), then per coordinator one DescribeGroups for all its groups and one
OffsetFetch (v8+: many groups a request; one group a request before). This is what makes
`tidemark groups describe --all-groups` one round of requests per broker, not one per group.

A consumer group (KIP-848, group.protocol=consumer) is not a classic group: DescribeGroups answers
it GROUP_ID_NOT_FOUND (or Dead with no members, as tidemark and Kafka 3.x do), so the groups it
answers that way are asked again with ConsumerGroupDescribe (API 69) at the same coordinator, which
also carries what only such a group has: each member's epoch and its target assignment.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import ConsumerGroupType
from kio.schema.errors import ErrorCode

from tidemark.client.admin import Admin, state_name
from tidemark.client.connection import RETRIABLE_COORDINATOR_ERRORS, RETRY_BACKOFF_S, Brokers, error_name
from tidemark.client.errors import ClientError, GroupNotFound
from tidemark.records.consumer_protocol import decode_assignment
from tidemark.wire.api_keys import ApiKey

TP = tuple[str, int]


CLASSIC, CONSUMER = "classic", "consumer"  # ListGroups v5's group types


@dataclass(frozen=True)
class MemberView:
    consumer_id: str
    host: str
    client_id: str
    partitions: tuple[TP, ...]  # the current assignment
    # A consumer group's member only: its epoch and the assignment it is moving to (None when
    # the answer did not say, as the AdminClient does not for the epoch).
    member_epoch: int | None = None
    target: tuple[TP, ...] | None = None


@dataclass(frozen=True)
class GroupView:
    """A group as DescribeGroups answers it, with its coordinator."""

    group: str
    state: str
    protocol_type: str
    assignor: str
    coordinator: tuple[int, str, int]  # node id, host, port
    members: tuple[MemberView, ...]
    group_type: str | None = CLASSIC  # None: the AdminClient could not tell


def _sorted(members: Sequence[MemberView]) -> tuple[MemberView, ...]:
    return tuple(sorted(members, key=lambda v: (-len(v.partitions), v.consumer_id)))


def _partitions(assignment) -> tuple[TP, ...]:
    return tuple(sorted((t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions))


def _consumer_group_view(g, coordinator: tuple[int, str, int]) -> GroupView:
    """A ConsumerGroupDescribe answer as a GroupView."""
    members = [MemberView(m.member_id, m.client_host, m.client_id, _partitions(m.assignment), int(m.member_epoch),
                          _partitions(m.target_assignment)) for m in g.members]
    return GroupView(g.group_id, g.group_state, CONSUMER, g.assignor_name, coordinator, _sorted(members), CONSUMER)


def _members(protocol_type: str, members: Sequence) -> tuple[MemberView, ...]:
    views = []
    for m in members:
        # Only a consumer group's assignment has the consumer protocol's layout (Connect's does not).
        decoded = decode_assignment(bytes(m.member_assignment)) if protocol_type in ("consumer", "") else None
        views.append(MemberView(m.member_id, m.client_host, m.client_id, tuple(sorted(decoded or ()))))
    return _sorted(views)


class GroupReader:
    """DescribeGroups and OffsetFetch for many groups over one set of broker connections. Each
    answer is per group: a value or the ClientError to report for that group alone."""

    def __init__(self, bootstrap: str, timeout_s: float) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.brokers = Brokers(bootstrap, timeout_s)

    def close(self) -> None:
        self.brokers.close()

    def __enter__(self) -> GroupReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _retrying(self, groups: Sequence[str], ask) -> dict[str, object]:
        """Run `ask(node_id, groups)` -> {group: value | ErrorCode} per coordinator, retrying the
        groups whose coordinator moved or is loading until the deadline."""
        results: dict[str, object] = {}
        todo = list(dict.fromkeys(groups))
        while todo:
            by_node, failed = self.brokers.by_coordinator(todo)
            for group, code in failed.items():
                results[group] = ClientError(f"Error: finding the coordinator of group '{group}' failed against "
                                             f"{self.bootstrap}: {error_name(code)}")
            retry: list[str] = []
            for node_id, mine in sorted(by_node.items()):
                for group, answer in ask(node_id, mine).items():
                    if (isinstance(answer, ErrorCode) and answer in RETRIABLE_COORDINATOR_ERRORS
                            and time.monotonic() + RETRY_BACKOFF_S < self.brokers.deadline):
                        retry.append(group)
                    else:
                        results[group] = answer
            todo = retry
            if todo:
                time.sleep(RETRY_BACKOFF_S)
        return results

    def describe(self, groups: Sequence[str]) -> dict[str, GroupView | ClientError]:
        def ask(node_id: int, mine: list[str]) -> dict[str, object]:
            connection = self.brokers.node(node_id)
            _version, response = connection.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": mine,
                                                                                "include_authorized_operations": False})
            answers: dict[str, object] = {}
            for g in response.groups:
                if g.error_code == ErrorCode.group_id_not_found or (
                        g.error_code == ErrorCode.none and g.group_state == "Dead" and not g.members):
                    answers[g.group_id] = GroupNotFound(g.group_id)
                elif g.error_code != ErrorCode.none:
                    answers[g.group_id] = g.error_code
                else:
                    answers[g.group_id] = GroupView(g.group_id, g.group_state, g.protocol_type, g.protocol_data,
                                                    (node_id, connection.host, connection.port),
                                                    _members(g.protocol_type, g.members))
            unknown = [group for group, answer in answers.items() if isinstance(answer, GroupNotFound)]
            if unknown and connection.version(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, required=False) >= 0:
                answers.update(self._consumer_groups(node_id, unknown))
            return answers

        return {group: self._final(group, answer, "describing") for group, answer in self._retrying(groups, ask).items()}

    def _consumer_groups(self, node_id: int, groups: list[str]) -> dict[str, object]:
        """ConsumerGroupDescribe of the groups DescribeGroups did not know: the consumer groups
        among them (the others keep their not-found answer)."""
        connection = self.brokers.node(node_id)
        _version, response = connection.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                                             {"group_ids": groups, "include_authorized_operations": False})
        answers: dict[str, object] = {}
        for g in response.groups:
            if g.error_code == ErrorCode.none and not (g.group_state == "Dead" and not g.members):
                answers[g.group_id] = _consumer_group_view(g, (node_id, connection.host, connection.port))
            elif g.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                answers[g.group_id] = g.error_code  # retried when retriable, else reported (e.g. not authorized)
        return answers

    def committed(self, groups: Sequence[str]) -> dict[str, dict[TP, int | None] | ClientError]:
        """Every committed offset of each group (None: the partition has none)."""

        def ask(node_id: int, mine: list[str]) -> dict[str, object]:
            connection = self.brokers.node(node_id)
            version = connection.version(ApiKey.OFFSET_FETCH, 8)
            answers: dict[str, object] = {}
            if version >= 8:
                response = connection.request(ApiKey.OFFSET_FETCH, version,
                                              {"groups": [{"group_id": g, "topics": None} for g in mine]})
                for g in response.groups:
                    answers[g.group_id] = self._offsets(g.group_id, g.error_code, g.topics)
                return answers
            if version < 2:
                raise ClientError(f"Error: the broker at {connection.host}:{connection.port} cannot list a "
                                  f"group's offsets (OffsetFetch v2+)")
            for group in mine:  # brokers before Kafka 3.0: one group a request
                response = connection.request(ApiKey.OFFSET_FETCH, version, {"group_id": group, "topics": None})
                answers[group] = self._offsets(group, response.error_code, response.topics)
            return answers

        return {group: self._final(group, answer, "fetching offsets of")
                for group, answer in self._retrying(groups, ask).items()}

    def _offsets(self, group: str, code: ErrorCode, topics: Sequence) -> object:
        if code != ErrorCode.none:
            return code
        offsets: dict[TP, int | None] = {}
        for topic in topics:
            for p in topic.partitions:
                if p.error_code != ErrorCode.none:
                    return ClientError(f"Error: fetching offset of {topic.name}-{p.partition_index} for group "
                                       f"'{group}' failed: {error_name(p.error_code)}")
                offset = int(p.committed_offset)
                offsets[(topic.name, int(p.partition_index))] = offset if offset >= 0 else None
        return offsets

    def _final(self, group: str, answer: object, what: str):
        if isinstance(answer, ErrorCode):
            return ClientError(f"Error: {what} group '{group}' failed against {self.bootstrap}: {error_name(answer)}")
        return answer


def _admin_partitions(assignment) -> tuple[TP, ...]:
    tps = assignment.topic_partitions if assignment is not None else []
    return tuple(sorted((tp.topic, tp.partition) for tp in tps))


class AdminGroupReader:
    """GroupReader's answers from the AdminClient, one group a request: for listeners the
    client layer's own connections cannot speak (SSL, SASL)."""

    def __init__(self, admin: Admin) -> None:
        self.admin = admin

    def close(self) -> None:
        pass

    def __enter__(self) -> AdminGroupReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def describe(self, groups: Sequence[str]) -> dict[str, GroupView | ClientError]:
        views: dict[str, GroupView | ClientError] = {}
        for group in groups:
            try:
                d = self.admin.describe(group)
            except ClientError as exc:
                views[group] = exc
                continue
            group_type = {ConsumerGroupType.CLASSIC: CLASSIC, ConsumerGroupType.CONSUMER: CONSUMER}.get(d.type)
            members = []
            for m in d.members:
                target = getattr(m, "target_assignment", None)
                members.append(MemberView(
                    m.member_id, m.host, m.client_id, _admin_partitions(m.assignment),
                    None, _admin_partitions(target) if group_type == CONSUMER and target is not None else None))
            coordinator = (d.coordinator.id, d.coordinator.host, d.coordinator.port) if d.coordinator else (-1, "", -1)
            views[group] = GroupView(group, state_name(d.state), "consumer" if not d.is_simple_consumer_group else "",
                                     d.partition_assignor or "", coordinator, _sorted(members), group_type)
        return views

    def committed(self, groups: Sequence[str]) -> dict[str, dict[TP, int | None] | ClientError]:
        found: dict[str, dict[TP, int | None] | ClientError] = {}
        for group in groups:
            try:
                found[group] = self.admin.committed(group)
            except ClientError as exc:
                found[group] = exc
        return found
