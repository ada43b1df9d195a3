"""Hold points: named steps where a fault test can stop the broker at a known moment.

With TIDEMARK_HOLD_AT=<point> in its environment, a broker that reaches that point logs a
`held` line naming it and waits there: until the file named by TIDEMARK_HOLD_RELEASE exists, or
for ever without one (the test SIGKILLs it). Tests wait for the line instead of guessing how
long a step takes. Unset, a hold point costs one environment lookup.

Points: `broker_start` (Broker.start with its logs open, before it listens and joins its
cluster), `offsets_load` (an offsets partition has read and replayed its log, before it becomes active),
`cleaner_write` (a cleaned segment is partly written), `swap_<step>` (each step of swapping a
cleaned segment in: cleaned, swap, deleted, renamed), `lag_report` (the lag report's job has read
the offsets log), `config_write` (a config change in ZooKeeper has read the entity's znode, before
its versioned write).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import structlog

HOLD_AT = "TIDEMARK_HOLD_AT"
HOLD_RELEASE = "TIDEMARK_HOLD_RELEASE"
_CHECK_EVERY_S = 0.01  # how often a held point looks for the release file

log = structlog.get_logger("tidemark.hold")


def _release_file(point: str) -> Path | None | bool:
    """False when `point` is not held; else the release file (None: held for ever)."""
    if os.environ.get(HOLD_AT) != point:
        return False
    log.warning("held", point=point, pid=os.getpid())
    release = os.environ.get(HOLD_RELEASE)
    return Path(release) if release else None


def hold(point: str) -> None:
    """Block this thread at `point` while a test holds it (for code running in worker threads)."""
    release = _release_file(point)
    while release is not False and (release is None or not release.exists()):
        time.sleep(_CHECK_EVERY_S)


async def hold_async(point: str) -> None:
    """Wait at `point` while a test holds it, leaving the event loop serving everything else."""
    release = _release_file(point)
    while release is not False and (release is None or not release.exists()):
        await asyncio.sleep(_CHECK_EVERY_S)
