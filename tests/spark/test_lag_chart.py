"""The lag report's chart, read at a glance whatever the number of groups, and its lag over time
in log order (no Spark needed: the chart is drawn on the driver from plain values)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tidemark import lag
from tidemark.spark.jobs import lag_history, lag_report

T = 1_700_000_000_000
MINUTE = 60_000


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def groups(count: int) -> list[tuple[str, int]]:
    return [(f"group-{i:04d}", i * 10) for i in range(count)]


def history(count: int) -> dict[str, list[tuple[int, int]]]:
    return {group: [(T, lag_now), (T + MINUTE, lag_now)] for group, lag_now in groups(count)}


@pytest.mark.parametrize("count", [1, 4, 302])
def test_one_size_for_any_number_of_groups(tmp_path: Path, count: int) -> None:
    path = tmp_path / "lag.png"
    lag_report.draw_chart(groups(count), path, over_time=history(count))
    height_in = lag_report.CHART_BARS_HEIGHT_IN + lag_report.CHART_TIME_HEIGHT_IN
    assert png_size(path) == (lag_report.CHART_WIDTH_IN * lag_report.CHART_DPI, height_in * lag_report.CHART_DPI)


def test_the_bars_are_named_the_top_20_by_lag_then_the_others() -> None:
    import matplotlib.pyplot as plt

    fig = lag_report.chart_figure(groups(302), over_time=history(302))
    try:
        bars, over_time = fig.axes
        names = [label.get_text() for label in bars.get_yticklabels()]
        assert names == [f"group-{i:04d}" for i in range(301, 281, -1)] + ["282 other groups"]
        values = [text.get_text() for text in bars.texts]
        assert values[0] == "3,010" and values[-1] == f"{sum(range(282)) * 10:,}"  # the others' true total
        legend = [text.get_text() for text in over_time.get_legend().get_texts()]
        assert legend == [f"group-{i:04d}" for i in range(301, 291, -1)]
    finally:
        plt.close(fig)


def test_a_long_group_name_is_shortened_in_the_middle() -> None:
    import matplotlib.pyplot as plt

    name = "analytics." + "x" * 80 + ".eu-west-1"
    fig = lag_report.chart_figure([(name, 5)])
    try:
        (shown,) = [label.get_text() for label in fig.axes[0].get_yticklabels()]
        assert len(shown) == lag_report.CHART_NAME_CHARS
        assert shown.startswith("analytics.") and shown.endswith(".eu-west-1")
    finally:
        plt.close(fig)


def test_commits_of_one_millisecond_count_in_log_order() -> None:
    # A consumer restarted: its first commit at T+1 min has lag 563, its next, in the same
    # millisecond and later in the log, 375; the lag stays 375 afterwards.
    commits = [lag.Commit(100, T, 375), lag.Commit(200, T + MINUTE, 563), lag.Commit(388, T + MINUTE, 375)]
    details = {("g", "events", 0): lag_history.Details(None, None, commits)}
    series = lag_history.group_lag_over_time(details, {("g", "events", 0): 375}, T + 30 * MINUTE)
    assert series == {"g": [(T, 375), (T + MINUTE, 375), (T + 30 * MINUTE, 375)]}


def test_commits_of_one_millisecond_on_several_partitions_are_one_point() -> None:
    details = {("g", "events", p): lag_history.Details(None, None, [lag.Commit(10, T, 5 * (p + 1))]) for p in range(3)}
    series = lag_history.group_lag_over_time(details, {key: 1 for key in details}, T + MINUTE)
    assert series == {"g": [(T, 30), (T + MINUTE, 3)]}
