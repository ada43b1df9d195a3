"""Where a follower truncates after asking its leader where an epoch ends (KIP-101, KIP-279).

The follower asks (OffsetForLeaderEpoch) for its latest epoch; the leader answers its largest
epoch at or below that one and where it ends on the leader. Kafka's AbstractFetcherThread then:

- no end offset to go by (the leader has no epochs): truncate to the high watermark, done
  (Kafka: to the partition's fetch offset, which is the high watermark when the loop starts;
  later rounds only come after a truncation, which brought the high watermark to at most there);
- the follower has the answered epoch too: truncate to the smaller of the two ends, done;
- the follower does not have it (the "fast leader changes" case: the leader skipped epochs the
  follower saw, or the follower skipped the leader's): truncate to the end of the follower's own
  largest epoch below the answered one, and ask again with the epoch now latest, until both
  name an epoch they share;
- the follower tracks no epoch at or below the answered one: truncate to the leader's end, done.

A follower with no epochs at all does not ask: the fetcher truncates it to its high watermark.

Never past the follower's own log end. Pure: the fetcher and the replication simulation both
decide with it, through `follower_truncation` (the follower's side looked up in its log).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from tidemark.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


class TruncationState(NamedTuple):
    offset: int  # truncate the follower's log to this end offset (no-op when at its log end)
    completed: bool  # False: ask the leader again with the follower's latest epoch afterwards


def truncation_state(answered_epoch: int, answered_end: int, follower_end_for_epoch: tuple[int, int] | None,
                     follower_log_end: int, follower_high_watermark: int) -> TruncationState:
    """Decide from the leader's answer (`answered_epoch`, `answered_end`) and the follower's own
    (largest epoch <= answered_epoch, its end offset), None when the follower has no epochs."""
    if answered_end == UNDEFINED_EPOCH_OFFSET:
        return TruncationState(min(follower_high_watermark, follower_log_end), True)
    if answered_epoch == UNDEFINED_EPOCH or follower_end_for_epoch is None:
        return TruncationState(min(answered_end, follower_log_end), True)
    follower_epoch, follower_end = follower_end_for_epoch
    if follower_epoch != answered_epoch:
        return TruncationState(min(follower_end, follower_log_end), False)
    return TruncationState(min(answered_end, follower_end, follower_log_end), True)


class FollowerLog(Protocol):
    """What the rule reads of the follower's log (a UnifiedLog; the simulation's log too)."""

    @property
    def log_end_offset(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]: ...


def follower_truncation(log: FollowerLog, answered_epoch: int, answered_end: int,
                        high_watermark: int) -> TruncationState:
    """truncation_state for `log` as it is now, given the leader's answer: the follower's own
    largest epoch at or below the answered one, and its end, come from the log's epochs."""
    own = log.end_offset_for_epoch(answered_epoch)
    return truncation_state(answered_epoch, answered_end, None if own[1] == UNDEFINED_EPOCH_OFFSET else own,
                            log.log_end_offset, high_watermark)
