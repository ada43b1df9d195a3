"""The cluster's view as this broker last applied it: what handlers answer from and wait on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tidemark.cluster.zk.metadata_view import EMPTY, ClusterSnapshot


class AppliedView:
    def __init__(self, request_timeout_ms: int) -> None:
        self.snapshot: ClusterSnapshot = EMPTY
        self.changed = asyncio.Event()  # set at every applied change (then replaced)
        self._default_timeout_s = request_timeout_ms / 1000

    def publish(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.changed.set()
        self.changed = asyncio.Event()

    async def wait_for(self, condition: Callable[[ClusterSnapshot], bool], timeout_s: float | None = None) -> None:
        """Until the applied view satisfies `condition`, at most timeout_s (request.timeout.ms
        by default): TimeoutError."""
        async with asyncio.timeout(self._default_timeout_s if timeout_s is None else timeout_s):
            while not condition(self.snapshot):
                await self.changed.wait()
