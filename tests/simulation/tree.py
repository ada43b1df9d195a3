"""What the code in this tree does where the simulation models a rule instead of calling it,
found by looking at that code, so a run mirrors the tree it tests: before and after each of
issue 23's fixes the same simulation drives what is there."""

from __future__ import annotations

import asyncio
import inspect

from tidemark.replication import partition as partition_module
from tidemark.replication import replica_fetcher

from .simlog import SimLog


def fetcher_truncation() -> str:
    """"kafka" once the replica fetcher decides with truncation_state, else "legacy" (defect 2)."""
    return "kafka" if "truncation_state" in inspect.getsource(replica_fetcher) else "legacy"


def follower_position_after_read() -> bool:
    """Whether fetch.py records a follower's fetch position only after its read succeeded."""
    from tidemark.broker.apis import fetch
    source = inspect.getsource(fetch._read_all)
    return source.index("follower_fetched") > source.index("log.read(")


def restart_high_watermark() -> str:
    """"checkpoint" once the broker keeps a replication-offset-checkpoint, else "log_end" (defect 5)."""
    from tidemark.log import manager
    return "checkpoint" if "replication-offset-checkpoint" in inspect.getsource(manager) else "log_end"


def waiters_survive_leadership_change() -> bool:
    """Defect 1: an acks=all waiter is still pending after its partition became a follower."""
    async def probe() -> bool:
        partition = partition_module.Partition("probe", 0, SimLog("probe"), local_id=1)
        partition.become_leader(1, (1, 2), frozenset((1, 2)), 0, 0)
        future = partition.wait_for_high_watermark(1)
        partition.become_follower(2, 2, (1, 2), frozenset((1, 2)), 1)
        survived = not future.done()
        if survived:
            future.cancel()
        else:
            future.exception()  # retrieved: asyncio would complain of it at exit
        return survived
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(probe())
    finally:
        loop.close()


def lone_leader_trusts_flushed_end() -> bool:
    """Defect 8: Partition keeps its own durable end (flushed_end), which truncation never lowers."""
    return "flushed_end" in inspect.getsource(partition_module)


def open_defects() -> set[str]:
    found = set()
    if waiters_survive_leadership_change():
        found.add("defect1")
    if fetcher_truncation() == "legacy":
        found.add("defect2")
    if restart_high_watermark() == "log_end":
        found.add("defect5")
    if lone_leader_trusts_flushed_end():
        found.add("defect8")
    return found
