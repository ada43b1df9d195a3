"""What a request costs a client against its quotas, and the throttle it is answered with.

Request time (request_percentage) is the time the event loop spent on the client's requests, as
Kafka counts request-handler and network-thread time: its frame's decoding, its handler's
coroutine steps, the coordinator events it submitted (the shard's handler and the append;
coordinator/runtime's EVENT_METER), its response's encoding and the write of the response to the
socket; not the time it waited (for an fsync, a follower, a long poll), as Kafka does not count
purgatory. The handler's part decides the request's own throttle; decoding, encoding and sending
are recorded as they happen and count toward the next. Produce is metered by the record bytes it
carries, Fetch by the record bytes it answers; a follower's fetch is exempt, as Kafka exempts
cluster actions.

A client under any quota has its requests handled one at a time, as Kafka handles every
connection's: the throttle decided on one answer mutes the connection before the next request
starts, so a pipelining client cannot have requests it already sent run past its quota.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from collections.abc import Coroutine, Generator
from typing import Any

from tidemark import metrics
from tidemark.broker.quotas.manager import (
    FETCH,
    PRODUCE,
    QUOTA_KEYS,
    QUOTA_TYPES,
    REQUEST,
    ClientQuotas,
    request_percentage,
)

PRODUCE_KEY = 0
FETCH_KEY = 1


class Timed:
    """Awaits a coroutine and adds up the time its steps ran (`seconds`), leaving out the
    time it was suspended."""

    __slots__ = ("coroutine", "seconds")

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.coroutine = coroutine
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, send, error = self.coroutine, None, None
        while True:
            started = time.perf_counter()
            try:
                yielded = coroutine.send(send) if error is None else coroutine.throw(error)
            except StopIteration as stop:
                self.seconds += time.perf_counter() - started
                return stop.value
            except BaseException:
                self.seconds += time.perf_counter() - started
                raise
            self.seconds += time.perf_counter() - started
            try:
                send, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task (a cancel): passed on
                send, error = None, exc


def user_of(principal: str) -> str:
    """The quota user of a principal: its name ("User:alice" -> "alice", Kafka's ANONYMOUS)."""
    kind, sep, name = principal.partition(":")
    return name if sep else principal


def produce_bytes(body: Any) -> int:
    return sum(len(data.records or b"") for topic in (getattr(body, "topic_data", None) or ())
               for data in topic.partition_data)


def fetch_bytes(result: Any) -> int:
    if not isinstance(result, dict):
        return 0
    return sum(len(p.get("records") or b"") for topic in result.get("responses") or ()
               for p in topic.get("partitions") or ())


def throttle_ms(quotas: ClientQuotas, principal: str, client_id: str | None, api_key: int, body: Any,
                result: Any, seconds: float, now_ms: int, follower: bool) -> int:
    """Record the request against the client's quotas; the longest throttle any of them gives
    (Kafka's max of the bandwidth and request-time throttles)."""
    if follower:
        return 0
    user, client = user_of(principal), client_id or ""
    throttles = {REQUEST: quotas.record(REQUEST, user, client, request_percentage(seconds), now_ms)}
    if api_key == PRODUCE_KEY and quotas.active(PRODUCE):
        throttles[PRODUCE] = quotas.record(PRODUCE, user, client, produce_bytes(body), now_ms)
    elif api_key == FETCH_KEY and quotas.active(FETCH):
        throttles[FETCH] = quotas.record(FETCH, user, client, fetch_bytes(result), now_ms)
    for key, ms in throttles.items():
        if ms:
            metrics.QUOTA_THROTTLE_SECONDS.labels(QUOTA_TYPES[key]).inc(ms / 1000)
            metrics.QUOTA_THROTTLED.labels(QUOTA_TYPES[key]).inc()
    return max(throttles.values())


def charge(quotas: ClientQuotas, principal: str, client_id: str | None, seconds: float, now_ms: int) -> None:
    """Time spent on a client's requests outside its handler (decoding its frames, encoding and
    sending its responses): recorded, it counts toward the client's next throttle."""
    quotas.record(REQUEST, user_of(principal), client_id or "", request_percentage(seconds), now_ms)


def limited(quotas: ClientQuotas, principal: str, client_id: str | None) -> bool:
    """Some quota applies to this client: its requests are handled one at a time."""
    user, client = user_of(principal), client_id or ""
    return any(quotas.active(key) and quotas.quota(key, user, client) is not None for key in QUOTA_KEYS)


def with_throttle(result: Any, ms: int) -> Any:
    """The response carrying throttle_time_ms (a copy: handlers may share response dicts)."""
    if isinstance(result, dict):
        return {**result, "throttle_time": ms}
    current = getattr(result, "throttle_time", None)
    if current is None or not dataclasses.is_dataclass(result):
        return result
    value = datetime.timedelta(milliseconds=ms) if isinstance(current, datetime.timedelta) else ms
    return dataclasses.replace(result, throttle_time=value)
