"""ApiVersions: which APIs and versions this broker speaks (KIP-511 fallback lives in the codec)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request


async def handle(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(ctx.supported_versions.items())
        ],
        "throttle_time": 0,
    }
