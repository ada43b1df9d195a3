"""Kafka's follower truncation rule (AbstractFetcherThread.getOffsetTruncationState), row by row:
what the leader answered to OffsetForLeaderEpoch, what the follower has, where it truncates and
whether it must ask again."""

from __future__ import annotations

import pytest

from tidemark.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from tidemark.replication.truncation import TruncationState, truncation_state

U, UO = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

# (case, answered epoch, answered end, follower's (largest epoch <= answered, its end) or None,
#  follower log end, follower high watermark) -> (truncate to, completed)
ROWS = [
    ("leader has no epochs: the high watermark", U, UO, None, 10, 4, (4, True)),
    ("leader has no epochs, high watermark past the log end", U, UO, None, 3, 5, (3, True)),
    ("end unknown even with an epoch: the high watermark", 3, UO, (3, 9), 10, 4, (4, True)),
    ("old protocol, no epoch answered: the leader's end", U, 7, (2, 9), 10, 4, (7, True)),
    ("old protocol, leader's end past the follower's", U, 12, (2, 9), 10, 4, (10, True)),
    ("follower tracks no epoch that old: the leader's end", 3, 7, None, 10, 4, (7, True)),
    ("follower tracks no epoch, never past its log end", 3, 12, None, 10, 4, (10, True)),
    ("same epoch, the leader's ends first", 3, 7, (3, 9), 10, 4, (7, True)),
    ("same epoch, the follower's ends first", 3, 9, (3, 7), 10, 4, (7, True)),
    ("same epoch, both past the log end", 3, 12, (3, 12), 10, 4, (10, True)),
    ("same epoch, nothing to cut", 3, 10, (3, 10), 10, 4, (10, True)),
    ("the issue's case: epoch 1 unknown to the follower", 1, 5, (0, 2), 6, 0, (2, False)),
    ("unknown epoch: the follower's own end, not the leader's", 4, 6, (3, 5), 7, 0, (5, False)),
    ("unknown epoch, follower's epoch ends past its log end", 1, 5, (0, 6), 6, 0, (6, False)),
    ("unknown epoch, high watermark plays no part", 4, 6, (3, 5), 7, 7, (5, False)),
    ("fast leader changes, last round: a shared epoch", 0, 2, (0, 1), 3, 0, (1, True)),
]


@pytest.mark.parametrize("case,epoch,end,own,log_end,high_watermark,expected", ROWS, ids=[r[0] for r in ROWS])
def test_truncation_state(case, epoch, end, own, log_end, high_watermark, expected):
    assert truncation_state(epoch, end, own, log_end, high_watermark) == TruncationState(*expected)


def test_the_fast_leader_changes_loop_ends_on_a_shared_epoch():
    """KIP-279's example: leader epochs 0@0 2@2 4@4 6@6 (end 8), follower 0@0 1@1 3@3 5@5
    (end 7), none shared past 0. Replaying the follower's rounds with the pure rule: it asks
    with its latest epoch each time, and ends at offset 1, where epoch 0 ends on the follower."""
    leader = [(0, 0), (2, 2), (4, 4), (6, 6)]
    follower = [(0, 0), (1, 1), (3, 3), (5, 5)]

    def end_for(entries, epoch, log_end):
        floor = [e for e in entries if e[0] <= epoch]
        higher = [e for e in entries if e[0] > epoch]
        if not floor:
            return None
        return floor[-1][0], higher[0][1] if higher else log_end

    log_end, rounds = 7, []
    while True:
        answered = end_for(leader, follower[-1][0], 8)
        state = truncation_state(*answered, end_for(follower, answered[0], log_end), log_end, 0)
        rounds.append((answered, state))
        log_end = min(log_end, state.offset)
        follower = [e for e in follower if e[1] < log_end]
        if state.completed:
            break
    assert rounds == [((4, 6), (5, False)), ((2, 4), (3, False)), ((0, 2), (1, True))]
    assert log_end == 1
