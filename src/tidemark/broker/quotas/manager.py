"""Kafka's client quota managers, pure: no sockets, no files, time given by the caller.

A quota entity is a (user, client id) pair in which each part is a name, DEFAULT (Kafka's
<default>: every user, or every client id, that has no quota of its own) or None (the part is not
in the entity). A client's quota is the first entity of Kafka's resolution order that has one
(`candidates`), and it is metered per client as that entity names it: a user quota is shared by
all of that user's clients, a default client-id quota is each client id's own.

Rates are Kafka's sampled rates: quota.window.num windows of quota.window.size.seconds, a window
starting at the first value recorded after the previous one ended, windows older than all of them
forgotten, and the rate divided by the time the windows span (at least num - 1 whole windows, so a
new client is not throttled for one burst). A value is recorded even when it breaks the quota;
when the rate is then above the quota, the client is throttled for the time that brings it back:
(rate - quota) / quota x the span, in ms; request-time throttles are bounded by one window, as in
Kafka's ClientRequestQuotaManager.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Final

DEFAULT: Final = "<default>"  # the default entity's stored name, Kafka's ConfigEntityName.Default

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
QUOTA_KEYS = (PRODUCE, FETCH, REQUEST)
# The quota types' names in Kafka's metrics (QuotaType).
QUOTA_TYPES = {PRODUCE: "Produce", FETCH: "Fetch", REQUEST: "Request"}

Entity = tuple[str | None, str | None]  # (user, client id); a part None when not in the entity


def candidates(user: str, client_id: str) -> Iterator[Entity]:
    """The entities whose quota applies to this user and client id, in Kafka's order of
    precedence (ClientQuotaManager's DefaultQuotaCallback)."""
    yield (user, client_id)
    yield (user, DEFAULT)
    yield (user, None)
    yield (DEFAULT, client_id)
    yield (DEFAULT, DEFAULT)
    yield (DEFAULT, None)
    yield (None, client_id)
    yield (None, DEFAULT)


def metered_as(entity: Entity, user: str, client_id: str) -> tuple[str, str]:
    """Whose usage a quota counts: the user's and/or client's own names where the entity has
    that part (a default stands for each user or client, not all of them together)."""
    return (user if entity[0] is not None else "", client_id if entity[1] is not None else "")


@dataclasses.dataclass(slots=True)
class _Sample:
    start_ms: int
    value: float = 0.0


class SampledRate:
    """Kafka's Rate over a SampledStat: a rate per second over `samples` windows of
    `window_ms`."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self.window_ms:  # complete: the next window starts now
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms))
            else:
                sample = self._samples[self._current]
                sample.start_ms, sample.value = now_ms, 0.0
            sample = self._samples[self._current]
        sample.value += value

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_ms:
                sample.start_ms, sample.value = now_ms, 0.0

    def window_span_ms(self, now_ms: int) -> int:
        """The time the rate is taken over: since the oldest window began, and at least
        samples - 1 whole windows."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def rate(self, now_ms: int) -> float:
        span_ms = self.window_span_ms(now_ms)  # purges first
        return sum(s.value for s in self._samples) / (span_ms / 1000)


class ClientQuotaManager:
    """One quota type's (Produce, Fetch or Request) usage per metered client and the throttle
    times it gives."""

    def __init__(self, key: str, samples: int = 11, window_s: int = 1,
                 max_throttle_ms: int | None = None) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_s * 1000
        self.max_throttle_ms = max_throttle_ms
        self._rates: dict[tuple[Entity, tuple[str, str]], SampledRate] = {}

    def record(self, quota: float, entity: Entity, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record `value` against the client's quota (`quota` of `entity`); the throttle time in
        ms it has earned (0 within the quota)."""
        key = (entity, metered_as(entity, user, client_id))
        rate = self._rates.get(key)
        if rate is None:
            rate = self._rates[key] = SampledRate(self.samples, self.window_ms)
        rate.record(value, now_ms)
        observed = rate.rate(now_ms)
        if observed <= quota:
            return 0
        throttle_ms = round((observed - quota) / quota * rate.window_span_ms(now_ms))
        if self.max_throttle_ms is not None:
            throttle_ms = min(throttle_ms, self.max_throttle_ms)
        return throttle_ms

    def forget(self) -> None:
        """Quotas changed: usage is metered afresh under whatever entity now applies."""
        self._rates.clear()


class ClientQuotas:
    """The quotas configured (entity -> {key: value}) and the three managers that meter them."""

    def __init__(self, samples: int = 11, window_s: int = 1) -> None:
        self.configs: dict[Entity, dict[str, float]] = {}
        self.produce = ClientQuotaManager(PRODUCE, samples, window_s)
        self.fetch = ClientQuotaManager(FETCH, samples, window_s)
        # Kafka bounds request-time throttles by one window (ClientRequestQuotaManager).
        self.request = ClientQuotaManager(REQUEST, samples, window_s, max_throttle_ms=window_s * 1000)
        self._managers = {PRODUCE: self.produce, FETCH: self.fetch, REQUEST: self.request}
        self._keys: frozenset[str] = frozenset()  # the keys any entity sets: the rest cost nothing

    @property
    def any(self) -> bool:
        """Some quota is set: requests are metered (none costs nothing)."""
        return bool(self._keys)

    def active(self, key: str) -> bool:
        return key in self._keys

    def set(self, entity: Entity, values: Mapping[str, float]) -> None:
        """Replace an entity's quotas (none: it has none)."""
        if values:
            self.configs[entity] = dict(values)
        else:
            self.configs.pop(entity, None)
        self._keys = frozenset(k for v in self.configs.values() for k in v)
        for manager in self._managers.values():
            manager.forget()

    def quota(self, key: str, user: str, client_id: str) -> tuple[Entity, float] | None:
        """The entity whose `key` quota applies to this client, and its value; None: unlimited."""
        configs = self.configs
        for entity in candidates(user, client_id):
            values = configs.get(entity)
            if values is not None and key in values:
                return entity, values[key]
        return None

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record usage of quota `key`; the throttle time in ms it earns (0: none)."""
        if key not in self._keys:
            return 0
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        entity, quota = found
        return self._managers[key].record(quota, entity, user, client_id, value, now_ms)


def request_percentage(seconds: float) -> float:
    """Request time as Kafka meters it: percent of one thread's second (nanos * 100 / 1e9)."""
    return seconds * 100
