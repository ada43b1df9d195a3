"""The lag report's time lag, Burrow's status and lag over time, on an offsets log and a topic
written with known timestamps (offline), and the clock given to the job."""

from __future__ import annotations

import struct

import pytest

from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_offset_commit_value,
)
from tidemark.spark.jobs import lag_history, lag_report
from tidemark.spark.jobs.common import read_offsets_log

T = 1_700_000_000_000
MINUTE = 60_000
NOW = T + 30 * MINUTE
RECORDS = 20  # events-0: offset i stamped T + i minutes


def _commit(group: str, offset: int | None, minute: int) -> tuple[bytes, bytes | None, tuple, int]:
    key = encode_key(OffsetCommitKey(group, "events", 0))
    if offset is None:
        return key, None, (), T + minute * MINUTE
    value = encode_offset_commit_value(OffsetCommitValue(offset, -1, "", T + minute * MINUTE, -1))
    return key, value, (), T + minute * MINUTE


# Each commit's lag is the log end at its time (the first offset stamped at or after it) minus its offset.
COMMITS = [
    _commit("stopped", 0, 2), _commit("stopped", 1, 4),  # lags 2, 3; silent since: STOP
    _commit("warn", 10, 9), _commit("warn", None, 9),  # history before a tombstone is not part of it
    _commit("warn", 1, 10), _commit("warn", 2, 18), _commit("warn", 3, 26),  # lags 9, 16, 17: WARN
    _commit("rewind", 5, 20), _commit("rewind", 7, 21), _commit("rewind", 3, 22),  # REWIND
    _commit("caught", 20, 25),  # lag 0: OK
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lag")
    (root / "__consumer_offsets-0").mkdir()
    (root / "__consumer_offsets-0" / "00000000000000000000.log").write_bytes(build_batch(COMMITS))
    (root / "events-0").mkdir()
    (root / "events-0" / "00000000000000000000.log").write_bytes(
        build_batch([(None, b"e", (), T + i * MINUTE) for i in range(RECORDS)]))
    return root


def test_time_lag_and_status_per_partition_and_group(spark, data_dir, tmp_path):
    chart = tmp_path / "lag.png"
    report, per_group = lag_report.main(spark, data_dir=str(data_dir), chart=str(chart), now_ms=NOW)
    rows = {r.group: (r.committed_offset, r.lag, r.lag_seconds, r.status) for r in report.collect()}
    assert rows == {
        "caught": (20, 0, 0.0, "OK"),
        "rewind": (3, 17, (NOW - (T + 3 * MINUTE)) / 1000, "REWIND"),
        "stopped": (1, 19, (NOW - (T + MINUTE)) / 1000, "STOP"),
        "warn": (3, 17, (NOW - (T + 3 * MINUTE)) / 1000, "WARN"),
    }
    assert {r.group: r.status for r in per_group.collect()} == {
        "caught": "OK", "rewind": "ERR", "stopped": "ERR", "warn": "WARN"}
    # Given history, the PNG has a second panel: lag over time.
    png = chart.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (
        lag_report.CHART_WIDTH_IN * lag_report.CHART_DPI,
        (lag_report.CHART_BARS_HEIGHT_IN + lag_report.CHART_TIME_HEIGHT_IN) * lag_report.CHART_DPI)


def test_lag_over_time_is_the_lag_at_each_commit(spark, data_dir):
    records = read_offsets_log(spark, data_dir=str(data_dir))
    history = [tuple(r) for r in lag_history.commit_history(records).collect()]
    committed = {("warn", "events", 0): 3, ("stopped", "events", 0): 1}
    details = lag_history.lag_details(history, committed, {("events", 0): RECORDS},
                                      lag_history.DataDirLookups(data_dir), NOW)
    assert [(c.offset, c.lag) for c in details[("warn", "events", 0)].history] == [(1, 9), (2, 16), (3, 17)]
    over_time = lag_history.group_lag_over_time(details, {key: RECORDS - o for key, o in committed.items()}, NOW)
    assert over_time["warn"] == [(T + 10 * MINUTE, 9), (T + 18 * MINUTE, 16), (T + 26 * MINUTE, 17), (NOW, 17)]
    assert over_time["stopped"] == [(T + 2 * MINUTE, 2), (T + 4 * MINUTE, 3), (NOW, 19)]
