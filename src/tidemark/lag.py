"""Consumer lag in records, in time, and Burrow's status of a partition over a window of commits.

Pure functions over numbers, shared by the broker's Prometheus export and `tidemark groups
describe` (which gathers the same numbers over the Kafka protocol from any cluster).

- Lag in records: log-end offset minus committed offset (kafka-consumer-groups' LAG).
- Lag in time: now minus the timestamp of the first unconsumed record (the record at the
  committed offset); 0 when the group is caught up. It says how old the oldest record waiting
  for the group is, which a lag in records cannot (10 000 records can be a second or a day).
- Status: Burrow's rules over the last WINDOW commits of a partition, each with the lag the
  partition had when it was made:
    OK      the lag is 0 now, or was 0 at some commit in the window
    REWIND  the committed offset went backwards within the window               (an error)
    STOP    no commit for longer than the window spans (now - last > last - first) (an error)
    STALL   the group keeps committing the same offset while lagging            (an error)
    WARN    the offset moves, but the lag never decreased from one commit to the next
  checked in that order, once the window holds two commits; a group's status is its worst partition's, with REWIND, STOP and
  STALL reported as ERR.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Burrow's default number of commits evaluated per partition.
WINDOW = 10

OK, WARN, ERR, STOP, STALL, REWIND = "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"
# Worst last; a group takes its worst partition's status.
_SEVERITY = {OK: 0, WARN: 1, ERR: 2, STOP: 3, STALL: 4, REWIND: 5}


@dataclass(frozen=True)
class Commit:
    """One commit of a partition: the offset, when (epoch ms), and the lag at that moment."""

    offset: int
    timestamp_ms: int
    lag: int


def records_lag(committed: int | None, log_end: int | None) -> int | None:
    if committed is None or log_end is None:
        return None
    return max(log_end - committed, 0)


def time_lag_ms(now_ms: int, lag: int | None, first_unconsumed_timestamp_ms: int | None) -> int | None:
    """now - timestamp of the record at the committed offset; 0 when caught up, None when unknown
    (no commit, or the record at the committed offset is gone). A record stamped in the future
    (clock skew) counts as 0, not negative."""
    if lag is None:
        return None
    if lag == 0:
        return 0
    if first_unconsumed_timestamp_ms is None or first_unconsumed_timestamp_ms < 0:
        return None
    return max(now_ms - first_unconsumed_timestamp_ms, 0)


def partition_status(window: Sequence[Commit], current_lag: int | None, now_ms: int) -> str:
    """Burrow's status of one partition from its last commits (oldest first) and its lag now."""
    if not current_lag or any(commit.lag == 0 for commit in window):
        return OK
    if len(window) < 2:
        # One commit spans no time and no movement: nothing to judge yet (Burrow would call a single
        # commit STOP a millisecond later).
        return OK
    pairs = list(zip(window, window[1:]))
    if any(later.offset < earlier.offset for earlier, later in pairs):
        return REWIND
    first, last = window[0].timestamp_ms, window[-1].timestamp_ms
    if now_ms - last > last - first:
        return STOP
    if all(later.offset == earlier.offset for earlier, later in pairs):
        return STALL
    if all(later.lag >= earlier.lag for earlier, later in pairs):
        return WARN
    return OK


def group_status(statuses: Iterable[str]) -> str:
    """The worst partition's status, REWIND, STOP and STALL counted as ERR (as Burrow reports a group)."""
    worst = max(statuses, key=_SEVERITY.__getitem__, default=OK)
    return ERR if _SEVERITY[worst] >= _SEVERITY[ERR] else worst


class CommitWindows:
    """The last WINDOW commits of every (group, topic, partition), in commit order."""

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self._windows: dict[tuple[str, str, int], list[Commit]] = {}

    def add(self, group: str, topic: str, partition: int, commit: Commit) -> None:
        window = self._windows.setdefault((group, topic, partition), [])
        window.append(commit)
        del window[:-self.size]

    def window(self, group: str, topic: str, partition: int) -> list[Commit]:
        return list(self._windows.get((group, topic, partition), ()))

    def forget(self, group: str, topic: str | None = None, partition: int | None = None) -> None:
        for key in [k for k in self._windows if k[0] == group and topic in (None, k[1]) and partition in (None, k[2])]:
            del self._windows[key]

    def keys(self) -> list[tuple[str, str, int]]:
        return sorted(self._windows)
