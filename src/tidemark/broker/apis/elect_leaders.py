"""ElectLeaders (KIP-183, KIP-460).

On the embedded broker every partition's only replica leads it, so no election is ever needed:
each named partition answers ELECTION_NOT_NEEDED, as Kafka does when the preferred leader
already leads (and for an unclean election when the leader is live).

On a ZooKeeper cluster a PREFERRED election goes to the controller through
/admin/preferred_replica_election (cluster/zk/preferred_election.py) and is answered with the
outcome: NONE (moved), ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE (not alive or not in
the ISR), UNKNOWN_TOPIC_OR_PARTITION. UNCLEAN elections are not made (tidemark only ever elects
from the ISR): ELECTION_NOT_NEEDED while the leader is live, ELIGIBLE_LEADERS_NOT_AVAILABLE
otherwise.

A request for every partition (null topics) leaves out the partitions that needed no election,
as Kafka does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.cluster import ClusterLink
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType

MESSAGES = {
    ErrorCode.none: None,
    ErrorCode.unknown_topic_or_partition: "The partition does not exist.",
    ErrorCode.election_not_needed: "Leader election not needed for topic partition.",
    ErrorCode.preferred_leader_not_available: "The preferred leader is not alive or not in the ISR.",
    ErrorCode.eligible_leaders_not_available: "Only in-sync replicas are elected leaders.",
    ErrorCode.request_timed_out: "The election did not complete within the request's timeout.",
}

Outcomes = dict[tuple[str, int], ErrorCode]


def _embedded(ctx: RequestContext, partitions: Iterable[tuple[str, int]]) -> Outcomes:
    return {(t, p): ErrorCode.election_not_needed if ctx.partitions.partition(t, p) is not None
            else ErrorCode.unknown_topic_or_partition for t, p in partitions}


def _unclean(cluster: ClusterLink, partitions: Iterable[tuple[str, int]]) -> Outcomes:
    outcomes = {}
    for key in partitions:
        view = cluster.snapshot.partitions.get(key)
        if view is None or view.state is None:
            outcomes[key] = ErrorCode.unknown_topic_or_partition
        elif view.leader in cluster.snapshot.brokers:
            outcomes[key] = ErrorCode.election_not_needed
        else:
            outcomes[key] = ErrorCode.eligible_leaders_not_available
    return outcomes


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if not access.allowed(ctx, access.ALTER, access.CLUSTER):  # as Kafka: the whole request refused
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "replica_election_results": [
            {"topic": t.topic, "partition_result": [
                {"partition_id": i, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None}
                for i in t.partitions]} for t in body.topic_partitions or ()]}
    election_type = getattr(body, "election_type", PREFERRED)  # v0 elects the preferred replica only
    every = body.topic_partitions is None
    if every:
        partitions = sorted(ctx.cluster.snapshot.partitions) if ctx.cluster is not None else []
    else:
        partitions = [(t.topic, index) for t in body.topic_partitions for index in t.partitions]
    if ctx.cluster is None:
        outcomes = _embedded(ctx, partitions)
    elif election_type == UNCLEAN:
        outcomes = _unclean(ctx.cluster, partitions)
    else:
        outcomes = await ctx.cluster.elect_preferred_leaders(partitions, body.timeout.total_seconds())
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in outcomes.items():
        if every and code == ErrorCode.election_not_needed:
            continue
        topics.setdefault(topic, []).append({"partition_id": index, "error_code": code, "error_message": MESSAGES[code]})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": [
        {"topic": topic, "partition_result": results} for topic, results in topics.items()]}
