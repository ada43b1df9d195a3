"""DescribeCluster (KIP-700): the cluster id, controller and live brokers an admin client asks for,
with the cluster's authorized operations (KIP-430) when asked."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.acl_operations import CLUSTER_OPERATIONS
from tidemark.broker.security import access

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

BROKER_ENDPOINT = 1  # Kafka's EndpointType: 0 unknown, 1 broker, 2 controller


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    endpoint_type = getattr(body, "endpoint_type", BROKER_ENDPOINT)  # v1+
    if endpoint_type != BROKER_ENDPOINT:
        # As Kafka's broker answers: v0 cannot name the endpoint errors; a controller endpoint
        # does not exist here (ZooKeeper-era controllers are brokers).
        if ctx.api_version == 0:
            code = ErrorCode.invalid_request
        elif endpoint_type == 2:
            code = ErrorCode.mismatched_endpoint_type
        else:
            code = ErrorCode.unsupported_endpoint_type
        message = (f"Unsupported endpoint type {endpoint_type}" if endpoint_type != 2 else
                   "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER")
        return {"throttle_time": 0, "error_code": code, "error_message": message, "cluster_id": "",
                "controller_id": -1, "brokers": [], "endpoint_type": BROKER_ENDPOINT}
    if ctx.cluster is None:
        brokers = [{"broker_id": ctx.node.id, "host": ctx.node.host, "port": ctx.node.port,
                    "rack": ctx.config["broker.rack"]}]
        controller = ctx.node.id
    else:
        brokers = [{"broker_id": b.id, "host": a[0], "port": a[1], "rack": b.rack}
                   for b in ctx.cluster.live_brokers() if (a := b.address(ctx.listener)) is not None]
        controller = ctx.cluster.snapshot.controller_id
    return {
        "throttle_time": 0,
        "error_code": 0,
        "error_message": None,
        "endpoint_type": BROKER_ENDPOINT,
        "cluster_id": ctx.partitions.metadata.cluster_id,
        "controller_id": controller,
        "brokers": brokers,
        "cluster_authorized_operations": access.operations_field(
            ctx, CLUSTER_OPERATIONS, body.include_cluster_authorized_operations, access.CLUSTER),
    }
