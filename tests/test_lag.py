"""Lag in time and Burrow's statuses: one scripted commit history per rule."""

from __future__ import annotations

import pytest

from tidemark.lag import (ERR, OK, REWIND, STALL, STOP, WARN, Commit, CommitWindows, group_status, partition_status,
                          records_lag, time_lag_ms)

MINUTE = 60_000
T0 = 1_700_000_000_000


def history(*pairs: tuple[int, int], step_ms: int = MINUTE) -> list[Commit]:
    """(offset, lag) per commit, one a minute from T0."""
    return [Commit(offset, T0 + i * step_ms, lag) for i, (offset, lag) in enumerate(pairs)]


NOW = T0 + 10 * MINUTE  # one minute after the tenth commit of a ten-commit history


def test_lag_in_records_and_time() -> None:
    assert records_lag(40, 100) == 60
    assert records_lag(None, 100) is None and records_lag(5, None) is None
    assert time_lag_ms(T0 + 5_000, 60, T0) == 5_000
    assert time_lag_ms(T0 + 5_000, 0, T0) == 0            # caught up: 0 whatever the timestamps
    assert time_lag_ms(T0, 3, T0 + 1_000) == 0             # a record stamped in the future
    assert time_lag_ms(T0, 3, None) is None                # the record at the offset is gone
    assert time_lag_ms(T0, None, T0) is None               # no commit


def test_rule_1_lag_zero_in_the_window_is_ok() -> None:
    # Stalled-looking history, but the consumer caught up once within the window.
    window = history(*[(50, 5)] * 4, (50, 0), *[(50, 5)] * 5)
    assert partition_status(window, 5, NOW) == OK
    # And no lag now is OK whatever came before.
    assert partition_status(history(*[(50, 5)] * 10), 0, NOW) == OK


def test_rule_2_rewind() -> None:
    window = history(*[(10 * i, 5) for i in range(1, 6)], (20, 40), *[(30 + i, 35) for i in range(4)])
    assert partition_status(window, 35, NOW) == REWIND


def test_rule_3_stop() -> None:
    """Ten commits over nine minutes, then nothing for more than nine minutes."""
    window = history(*[(10 * i, 5) for i in range(1, 11)])
    assert partition_status(window, 5, T0 + 9 * MINUTE + 9 * MINUTE) == WARN  # exactly as long: not yet
    assert partition_status(window, 5, T0 + 9 * MINUTE + 9 * MINUTE + 1) == STOP


def test_rule_4_stall() -> None:
    window = history(*[(50, 5 + i) for i in range(10)])
    assert partition_status(window, 15, NOW) == STALL


def test_rule_5_lag_not_decreasing_is_a_warning() -> None:
    window = history(*[(10 * i, 5 + i) for i in range(10)])
    assert partition_status(window, 15, NOW) == WARN
    # Equal lags throughout count as not decreasing too.
    assert partition_status(history(*[(10 * i, 7) for i in range(10)]), 7, NOW) == WARN


def test_a_consumer_catching_up_is_ok() -> None:
    window = history(*[(10 * i, 100 - i) for i in range(10)])
    assert partition_status(window, 90, NOW) == OK
    assert partition_status([], 90, NOW) == OK   # no history: nothing to judge
    assert partition_status(history((50, 5)), 5, NOW) == OK   # one commit spans no time


def test_rules_are_checked_worst_first() -> None:
    # Rewound and stopped: REWIND wins over STOP.
    window = history((30, 5), (20, 5))
    assert partition_status(window, 5, T0 + 60 * MINUTE) == REWIND
    # Stalled and stopped: STOP wins over STALL.
    assert partition_status(history((50, 5), (50, 5)), 5, T0 + 60 * MINUTE) == STOP


def test_group_status_is_the_worst_partition_with_errors_as_err() -> None:
    assert group_status([]) == OK
    assert group_status([OK, WARN, OK]) == WARN
    assert group_status([OK, STALL]) == ERR
    assert group_status([WARN, REWIND, STOP]) == ERR


def test_commit_windows_keep_the_last_commits() -> None:
    windows = CommitWindows(size=3)
    for i in range(5):
        windows.add("g", "t", 0, Commit(i, T0 + i, 1))
    windows.add("g", "t", 1, Commit(9, T0, 0))
    assert [c.offset for c in windows.window("g", "t", 0)] == [2, 3, 4]
    windows.forget("g", "t", 1)
    assert windows.keys() == [("g", "t", 0)]
    windows.forget("g")
    assert windows.keys() == []


@pytest.mark.parametrize("lag", [0, 1])
def test_stop_does_not_apply_when_caught_up(lag: int) -> None:
    window = history((50, 5), (60, 5))
    assert partition_status(window, lag, T0 + 60 * MINUTE) == (OK if lag == 0 else STOP)
