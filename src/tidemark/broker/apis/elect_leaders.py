"""ElectLeaders (KIP-183, KIP-460): on the embedded broker every partition's only replica leads it.

So no election is ever needed: each named partition answers ELECTION_NOT_NEEDED, as Kafka does
when the preferred leader already leads (and for an unclean election when the leader is live),
and a request for every partition (null topics) answers nothing, as Kafka leaves out the
partitions that needed no election.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


def _result(ctx: RequestContext, topic: str, index: int) -> dict[str, Any]:
    if ctx.replicas.partition(topic, index) is None:
        return {"partition_id": index, "error_code": ErrorCode.unknown_topic_or_partition,
                "error_message": "The partition does not exist."}
    return {"partition_id": index, "error_code": ErrorCode.election_not_needed,
            "error_message": "Leader election not needed for topic partition."}


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    wanted = request.body.topic_partitions
    return {"throttle_time": 0, "error_code": ErrorCode.none, "replica_election_results": [
        {"topic": t.topic, "partition_result": [_result(ctx, t.topic, index) for index in t.partitions]}
        for t in wanted or ()]}
