"""InitProducerId for idempotent producers (transactions are not supported)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from tidemark.broker.server import Broker
    from tidemark.wire.codec import Request

MAX_EPOCH = 32767


async def handle(broker: Broker, request: Request) -> dict[str, Any]:
    body = request.body
    if body.transactional_id is not None:
        # No transaction coordinator: refuse clearly instead of letting the client retry forever.
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    producer_id = getattr(body, "producer_id", -1)
    producer_epoch = getattr(body, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= producer_epoch < MAX_EPOCH - 1:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        return {"throttle_time": 0, "error_code": 0, "producer_id": producer_id, "producer_epoch": producer_epoch + 1}
    return {
        "throttle_time": 0,
        "error_code": 0,
        "producer_id": broker.replicas.metadata.next_producer_id(),
        "producer_epoch": 0,
    }
