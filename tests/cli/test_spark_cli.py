"""`tidemark spark ...`: one real run of each job (each starts a JVM, so few), plus argument checks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tidemark.cli.main import main
from tidemark.cli.spark import parse_time
from tidemark.records import build_batch
from tidemark.records.offsets_schema import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_value,
    encode_key,
    encode_offset_commit_value,
)

T = 1_700_000_000_000  # 2023-11-14T22:13:20Z
MINUTE = 60_000
RUN_TIMEOUT_S = 300


def _commit(group: str, topic: str, partition: int, offset: int, at: int = T) -> tuple:
    return (encode_key(OffsetCommitKey(group, topic, partition)),
            encode_offset_commit_value(OffsetCommitValue(offset, 2, "", at)), (), at)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cli")
    (root / "__consumer_offsets-1").mkdir()
    empty = encode_group_metadata_value(GroupMetadataValue("consumer", 5, None, None, T + 30 * MINUTE, ()))
    (root / "__consumer_offsets-1" / "00000000000000000000.log").write_bytes(build_batch([
        _commit("etl", "orders", 0, 1),
        _commit("etl", "orders", 0, 4),
        _commit("etl", "orders", 1, 6),
        (encode_key(GroupMetadataKey("etl")), empty, (), T),
        _commit("solo", "orders", 1, 2, at=T + MINUTE),
        _commit("solo", "orders", 0, 3),
        (encode_key(OffsetCommitKey("solo", "orders", 0)), None, (), T),
    ]))
    for partition, messages in ((0, 10), (1, 20)):  # orders: log-end offsets 10 and 20
        directory = root / f"orders-{partition}"
        directory.mkdir()
        (directory / "00000000000000000000.log").write_bytes(
            build_batch([(None, b"x", (), T)] * messages))
    return root


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYSPARK_PYTHON": sys.executable}
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "spark", *args, "--master", "local[1]"],
                            capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _table_rows(stdout: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("│ ").split("│")] for line in stdout.splitlines()
            if line.startswith("│")]


def test_offsets_snapshot_prints_and_writes_csv(data_dir, tmp_path):
    out = tmp_path / "snapshot"
    result = _run("offsets-snapshot", "--data-dir", str(data_dir), "--output", str(out), "--format", "csv")
    rows = [row[:5] for row in _table_rows(result.stdout)]
    assert rows == [["etl", "orders", "0", "4", "2"], ["etl", "orders", "1", "6", "2"],
                    ["solo", "orders", "1", "2", "2"]]
    # One CSV file with one header line, whatever the number of Spark partitions.
    [path] = out.glob("part-*.csv")
    header, *lines = path.read_text().splitlines()
    assert header.startswith("group,topic,partition,committed_offset,leader_epoch,metadata,")
    written = [line.split(",")[:4] for line in lines]
    assert sorted(written) == [["etl", "orders", "0", "4"], ["etl", "orders", "1", "6"], ["solo", "orders", "1", "2"]]
    # Piped, the steps show as lines on stderr while Spark starts and works.
    steps = [line for line in result.stderr.splitlines() if line.endswith(" ...")]
    assert steps == ["starting Spark ...", "reading the offsets log ..."]


def test_lag_report_prints_writes_parquet_and_draws(data_dir, tmp_path):
    chart = tmp_path / "lag.png"
    (tmp_path / "lag").mkdir()
    (tmp_path / "lag" / "old-report.txt").write_text("replaced, as --overwrite asks")
    result = _run("lag-report", "--data-dir", str(data_dir), "--output", str(tmp_path / "lag"), "--chart", str(chart),
                  "--overwrite")
    rows = _table_rows(result.stdout)
    # Every record is stamped T: the lag in seconds is the run's now minus T.
    assert [row[:6] + row[7:] for row in rows[:3]] == [
        ["etl", "orders", "0", "4", "10", "6", "OK"], ["etl", "orders", "1", "6", "20", "14", "OK"],
        ["solo", "orders", "1", "2", "20", "18", "OK"]]
    assert all(float(row[6].replace(",", "")) > 0 for row in rows[:3])
    assert rows[3:] == [["etl", "2", "20", "OK"], ["solo", "1", "18", "OK"]]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((tmp_path / "lag").glob("part-*.parquet"))
    assert not (tmp_path / "lag" / "old-report.txt").exists()


@pytest.mark.parametrize("job", ["offsets-snapshot", "lag-report", "expiry-report"])
def test_a_non_empty_output_is_refused_before_spark_starts(data_dir, tmp_path, job):
    """`--output tidemark-data` would have deleted the broker's data (Spark writes with overwrite)."""
    precious = tmp_path / "precious.txt"
    precious.write_text("broker data")
    for output in (tmp_path, precious):
        result = CliRunner().invoke(main, ["spark", job, "--data-dir", str(data_dir), "--output", str(output),
                                           "--at", "0"][: 6 if job != "expiry-report" else 8])
        assert result.exit_code == 2, result.output
        assert (f"--output {output} exists and is not empty; its contents would be deleted. Give another path, "
                f"or --overwrite to replace it.") in " ".join(result.stderr.split())
        assert precious.read_text() == "broker data"


def test_a_data_dir_without_offsets_partitions_is_an_error(tmp_path):
    (tmp_path / "orders-0").mkdir()
    result = CliRunner().invoke(main, ["spark", "lag-report", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr == (f"Error: no __consumer_offsets-N directories in {tmp_path}: not a tidemark data "
                             f"directory, or no consumer group has committed offsets to it yet\n")


def test_an_unreachable_bootstrap_server_fails_before_spark_starts():
    with socket.socket() as probe:  # a port nothing listens on: bound, never listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        for job in (["offsets-snapshot"], ["lag-report"], ["expiry-report", "--at", "0"]):
            result = CliRunner().invoke(main, ["spark", *job, "--bootstrap-server", f"127.0.0.1:{port}"])
            assert result.exit_code == 1
            assert result.stderr == f"Error: cannot reach bootstrap server 127.0.0.1:{port}: Connection refused\n"
            assert result.stdout == ""


def test_expiry_report_at_a_time(data_dir):
    # 45 minutes in, retention 20: etl (Empty since T+30) keeps its offsets under KIP-211, but the
    # old rules drop everything committed at T; solo (standalone) expires from its commit.
    result = _run("expiry-report", "--data-dir", str(data_dir), "--at", "2023-11-14T22:58:20Z",
                  "--retention-minutes", "20")
    rows = _table_rows(result.stdout)
    assert [[row[0], row[2], row[4], row[6], row[8]] for row in rows[:3]] == [
        ["etl", "0", "Empty", "no", "yes"], ["etl", "1", "Empty", "no", "yes"], ["solo", "1", "none", "yes", "yes"]]
    assert rows[3:] == [["etl", "Empty", "2", "0", "2", "no"], ["solo", "none", "1", "1", "1", "yes"]]


def test_one_source_is_required():
    runner = CliRunner()
    result = runner.invoke(main, ["spark", "offsets-snapshot"])
    assert result.exit_code == 2 and "one of --bootstrap-server and --data-dir" in result.output
    result = runner.invoke(main, ["spark", "lag-report", "--data-dir", ".", "--bootstrap-server", "h:1"])
    assert result.exit_code == 2
    result = runner.invoke(main, ["spark", "expiry-report", "--data-dir", ".", "--at", "yesterday"])
    assert result.exit_code == 2 and "--at" in result.output


def test_parse_time():
    assert parse_time("1700000000000") == T
    assert parse_time("2023-11-14T22:13:20Z") == T
    assert parse_time("2023-11-14T23:13:20+01:00") == T
    assert parse_time("2023-11-14T22:13:20.5") == T + 500


def test_a_cluster_without_an_offsets_topic_is_an_error(make_broker):
    """Nothing committed yet: one line before Spark starts, not an empty report after it."""
    broker = make_broker().start()
    for job in (["offsets-snapshot"], ["lag-report"], ["expiry-report", "--at", "0"]):
        result = CliRunner().invoke(main, ["spark", *job, "--bootstrap-server", broker.bootstrap])
        assert result.exit_code == 1
        assert result.stderr == (f"Error: no __consumer_offsets topic on {broker.bootstrap}: no consumer group has "
                                 f"committed offsets to it yet\n")
        assert result.stdout == ""
    # Listing the topics did not create it.
    from confluent_kafka.admin import AdminClient

    assert "__consumer_offsets" not in AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(
        timeout=30).topics


@pytest.mark.parametrize("chart", ["/nonexistent/dir/lag.png", "."])
def test_a_chart_that_cannot_be_written_is_refused_before_spark_starts(data_dir, chart):
    result = CliRunner().invoke(main, ["spark", "lag-report", "--data-dir", str(data_dir), "--chart", chart])
    assert result.exit_code == 2
    assert "Invalid value for '--chart'" in result.output
    assert "starting Spark" not in result.output
