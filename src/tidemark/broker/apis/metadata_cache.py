"""Metadata's partition entries, built once per (response version, topic) and kept while what
they say holds.

Clients ask for a topic's metadata as they start and on every leadership change; with hundreds of
partitions, making each partition's dict and building kio's entity from it was most of a Metadata
answer's CPU (some 50 us a partition on a busy machine, 40 ms for 800 partitions, eight clients
asking at once). The built entities are immutable, so one answer's tuple can be the next one's.

Each entry is kept with the inputs it was made from, compared on every request: on a cluster the
view's snapshot (a new, frozen object for any change of brokers, leaders, epochs, ISRs, replicas
or topics) and the topic's partition count; on a single node the node id and every partition's
leader epoch. A hit therefore is exactly what building afresh would give.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable
from functools import cache
from typing import Any

from tidemark.wire.build import build

MAX_ENTRIES = 4096  # (version, topic) pairs per broker; past it the cache starts over

# One cache per broker (its partition manager): tests run several brokers in one process.
_caches: weakref.WeakKeyDictionary[Any, dict[tuple[int, str], tuple[Any, Any, tuple[Any, ...]]]] = \
    weakref.WeakKeyDictionary()


@cache
def partition_class(version: int) -> type:
    return importlib.import_module(f"kio.schema.metadata.v{version}.response").MetadataResponsePartition


def partition_entries(ctx: Any, topic: str, count: int,
                      entry: Callable[[Any, str, int], dict[str, Any]]) -> tuple[Any, ...]:
    """The built partition entities of `topic` (`count` partitions) for this request's version,
    from the cache when the inputs `entry` reads are unchanged."""
    if ctx.cluster is None:
        live = ctx.partitions.partitions
        # What a single node's entries say: its id and each partition's epoch.
        source: Any = None
        key: Any = (ctx.node.id, count, tuple(live[(topic, i)].leader_epoch for i in range(count)))
    else:
        source = ctx.cluster.snapshot  # replaced, never changed in place: compared by identity
        key = count
    cache_ = _caches.get(ctx.partitions)
    if cache_ is None:
        cache_ = _caches[ctx.partitions] = {}
    version = ctx.api_version
    held = cache_.get((version, topic))
    if held is not None and held[0] is source and held[1] == key:
        return held[2]
    cls = partition_class(version)
    built = tuple(build(cls, entry(ctx, topic, index)) for index in range(count))
    if len(cache_) >= MAX_ENTRIES:
        cache_.clear()
    cache_[(version, topic)] = (source, key, built)
    return built
