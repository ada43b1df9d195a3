"""The broker process's garbage collector: what it costs the event loop, and keeping the
long-lived startup heap out of its full collections.

A full (generation 2) collection walks every container object the process tracks. After start
that is mostly what never goes away: the modules, kio's generated schemas and entity classes,
the logs' indexes and the broker's wiring, some 70k objects, which took about 100 ms per full
collection on a busy 2-core machine. A commit load makes several full collections a minute, and
each stalls the event loop (and every commit waiting on it) for that long. Freezing the heap
once the broker is up (gc.freeze: a permanent generation the collector skips) leaves full
collections only the objects made since.

The youngest generation's threshold is raised too. Its counter is tracked allocations minus
deallocations, so what triggers a young collection is how many tracked objects are alive at once
at the peak, and a 100-partition commit alone holds over a thousand (the decoded request, the
records, the response dicts) until it is answered, all freed by reference counting: at Python's
default of 700 a broker under 8 clients committing 100 partitions each ran some 200 young, 18
middle and 1.6 full collections a second, 12-20% of its CPU (the full ones walk every object
made since the freeze: the topics' logs and partitions). At 10,000 the same load ran under one
young collection a second and no full one. Garbage in cycles still waits for at most that many
net allocations, so memory stays bounded.
"""

from __future__ import annotations

import gc
import time

from tidemark import metrics

YOUNG_THRESHOLD = 10_000  # tracked allocations (net) between young collections; Python's default is 700

_started: dict[int, float] = {}
# Each generation's histogram child, looked up once: a young collection runs every few hundred
# allocations under load, and labels() on each was a visible share of a commit's CPU.
_PAUSES = {generation: metrics.GC_PAUSE_SECONDS.labels(str(generation)) for generation in range(3)}


def _observe(phase: str, info: dict[str, int]) -> None:
    generation = info["generation"]
    if phase == "start":
        _started[generation] = time.perf_counter()
    elif generation in _started:
        _PAUSES[generation].observe(time.perf_counter() - _started.pop(generation))


def observe_gc_pauses() -> None:
    """Time every collection into tidemark_gc_pause_seconds (by generation); once per process."""
    if _observe not in gc.callbacks:
        gc.callbacks.append(_observe)


def freeze_startup_heap() -> int:
    """Collect what starting left behind, then move everything still alive to the permanent
    generation: objects frozen are still freed by reference counting, only the cycle collector
    no longer walks them; and raise the young generation's threshold (the older generations keep
    theirs). Returns how many objects are frozen."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    return gc.get_freeze_count()
