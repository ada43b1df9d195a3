"""What a coordinator handler returns: records to append, then responses to release."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetsRecord:
    """One `__consumer_offsets` record: encoded key and value (None is a tombstone)."""

    key: bytes
    value: bytes | None
    # The decoded key and value when the shard built them, so replaying its own committed
    # records need not decode what it just encoded. Always the same content as the bytes.
    decoded: tuple[Any, Any] | None = None


@dataclasses.dataclass(slots=True)
class Result:
    """The outcome of one event (a request or a timer) on a coordinator shard.

    `records` are appended to the shard's offsets partition with acks=all; only once they are
    committed (high watermark past them) does the runtime replay them into the shard and release
    `responses`. If the append fails, nothing is replayed and `failure_responses(code)` is sent
    instead. `responses` maps a request token (chosen by the runtime when it calls the shard) to
    the response for that request: an event can answer requests other than its own (a JoinGroup
    completing a rebalance answers every member waiting in JoinGroup).
    """

    records: list[OffsetsRecord] = dataclasses.field(default_factory=list)
    responses: dict[int, Any] = dataclasses.field(default_factory=dict)
    # Built lazily by the runtime on append failure: token -> response carrying the mapped error.
    on_append_failure: Any = None

    def respond(self, token: int, response: Any) -> Result:
        self.responses[token] = response
        return self
