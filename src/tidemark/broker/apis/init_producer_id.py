"""InitProducerId: idempotent producers here, transactional ones at the transaction coordinator
(apis/transactions.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.apis import transactions
from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id == "":
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is not None and not access.allowed(ctx, access.WRITE, access.TRANSACTIONAL_ID,
                                                                body.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is None and not (access.allowed(ctx, access.IDEMPOTENT_WRITE, access.CLUSTER)
                                              or access.allowed_any(ctx, access.WRITE, access.TOPIC)):
        # As Kafka (KIP-679): an idempotent producer needs IDEMPOTENT_WRITE or WRITE on some topic.
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is not None:
        return await transactions.init_producer_id(ctx, request)  # the transaction coordinator's
    # Without a transactional id Kafka always hands out a fresh producer id at epoch 0, even
    # when the client names its current id and epoch (KIP-360): bumping a named id would let
    # any client fence another producer.
    # In a cluster a new block of ids is claimed in ZooKeeper, off the event loop.
    producer_id = await ctx.cluster.next_producer_id() if ctx.cluster is not None \
        else ctx.partitions.metadata.next_producer_id()
    return {
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": producer_id,
        "producer_epoch": 0,
    }
