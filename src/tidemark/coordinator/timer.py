"""The coordinator timer: keyed deadlines in a heap (Kafka's CoordinatorTimer, ours).

One key per thing that can time out (a member's session, a group's join or sync phase, a
shard's retention check). Scheduling a key replaces its previous event; the old heap entry is
left behind and skipped when it surfaces (lazy deletion by the key's generation), so scheduling,
cancelling and firing cost O(log n) in the number of deadlines, never a scan of every member.

Pure: no clock, no event loop. The runtime asks for `next_deadline()`, arms one wake-up, and
fires what is due with `pop_due(now_ms)`; tests drive it with a manual clock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Any

# What a timed-out key runs: given the current time, it returns the event's Result.
TimerEvent = Callable[[int], Any]


class CoordinatorTimer:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Hashable]] = []  # (deadline, generation, key)
        self._live: dict[Hashable, tuple[int, int, TimerEvent]] = {}  # key -> (generation, deadline, event)
        self._generations = itertools.count()

    def __len__(self) -> int:
        return len(self._live)

    def schedule(self, key: Hashable, deadline_ms: int, event: TimerEvent) -> None:
        """Run `event` at `deadline_ms`, replacing any event scheduled for `key`."""
        current = self._live.get(key)
        if current is not None and current[1] == deadline_ms:
            self._live[key] = (current[0], deadline_ms, event)  # same deadline: keep its heap entry
            return
        generation = next(self._generations)
        self._live[key] = (generation, deadline_ms, event)
        heapq.heappush(self._heap, (deadline_ms, generation, key))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._live

    def deadline(self, key: Hashable) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[1]

    def next_deadline(self) -> int | None:
        """The earliest live deadline, or None."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[tuple[Hashable, TimerEvent]]:
        """Remove and return every event due at `now_ms`, earliest first."""
        due = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now_ms:
                return due
            _, _, key = heapq.heappop(self._heap)
            _, _, event = self._live.pop(key)
            due.append((key, event))

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def _drop_stale(self) -> None:
        heap, live = self._heap, self._live
        while heap:
            _, generation, key = heap[0]
            entry = live.get(key)
            if entry is not None and entry[0] == generation:
                return
            heapq.heappop(heap)

    def _compact(self) -> None:
        """Rebuild the heap from live entries once stale ones dominate (bounded memory)."""
        self._heap = [(deadline, generation, key) for key, (generation, deadline, _) in self._live.items()]
        heapq.heapify(self._heap)
