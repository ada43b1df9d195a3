"""The "tidemark" source and sink and the offsets-log jobs on a real Spark standalone cluster (a
master and two workers, executors in their own JVMs and Python workers), through spark-submit,
checked as the local tests check them: exact rows and the group's committed offsets."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.conftest import BrokerProcess
from tests.spark.standalone import StandaloneCluster, source_root
from tests.spark.test_source import committed, create_topic, expected_offsets, produce
from tidemark.spark.shipping import HINTS

PARTITIONS = 3
RECORDS = 240
PIPELINE = Path(__file__).with_name("cluster_pipeline.py")


@pytest.fixture(scope="module")
def kafka(group_broker: BrokerProcess) -> BrokerProcess:
    """The module's broker: tests/conftest.py's, set up for consumer groups."""
    return group_broker


@pytest.fixture(scope="module")
def standalone(tmp_path_factory) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(tmp_path_factory.mktemp("standalone")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def submitted(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result


def read_all(kafka: BrokerProcess, topic: str, partitions: int) -> list[bytes]:
    """Every value of `topic`, read to each partition's end with a plain consumer."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "cluster-check",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, ended = [], set()
    try:
        while len(ended) < partitions:
            message = consumer.poll(30)
            assert message is not None, f"no record of {topic} within 30 s after {len(values)}"
            if message.error():
                ended.add(message.partition())
            else:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def csv_rows(directory: Path) -> list[dict[str, str]]:
    (part,) = directory.glob("part-*.csv")
    with part.open() as f:
        return list(csv.DictReader(f))


def test_source_stream_and_sink_through_spark_submit(standalone, kafka, tmp_path):
    create_topic(kafka, "cluster-in", PARTITIONS)
    create_topic(kafka, "cluster-out", PARTITIONS)
    sent = produce(kafka, "cluster-in", RECORDS, PARTITIONS)
    result_path = tmp_path / "result.json"
    submitted(standalone.submit(str(PIPELINE), kafka.bootstrap, "cluster-in", "cluster-out", "cluster-pipeline",
                                str(tmp_path / "checkpoint"), str(result_path)))
    result = json.loads(result_path.read_text())
    assert result["master"] == standalone.url
    # The batch read: every record exactly once.
    batch = result["batch"]
    assert len(batch) == RECORDS
    assert {(p, o, v.encode()) for p, o, v in batch} == expected_offsets(sent, PARTITIONS)
    # The streaming query: 240 records at most 40 a batch, all through the sink exactly once,
    # and its last batch's end offsets committed to the group.
    assert result["batches"] >= RECORDS // 40
    assert sorted(read_all(kafka, "cluster-out", PARTITIONS)) == sorted(v for _, _, v in sent)
    assert committed(kafka, "cluster-pipeline") == {("cluster-in", p): RECORDS // PARTITIONS
                                                    for p in range(PARTITIONS)}
    # The work ran in executors of both workers, not in the driver.
    assert all(count >= 1 for count in standalone.executors_launched()), standalone.executors_launched()


@pytest.fixture(scope="module")
def committed_group(kafka) -> dict[int, int]:
    """Group "jobs" committed offsets 3, 5, 7 of "jobs-topic" (10 records a partition)."""
    create_topic(kafka, "jobs-topic", PARTITIONS)
    produce(kafka, "jobs-topic", 10 * PARTITIONS, PARTITIONS)
    offsets = {0: 3, 1: 5, 2: 7}
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    request = [ConsumerGroupTopicPartitions("jobs", [TopicPartition("jobs-topic", p, o) for p, o in offsets.items()])]
    admin.alter_consumer_group_offsets(request)["jobs"].result(30)
    return offsets


def jobs_rows(rows: list[dict[str, str]], *columns: str) -> dict[int, tuple]:
    return {int(r["partition"]): tuple(r[c] for c in columns) for r in rows if r["group"] == "jobs"}


def test_offsets_snapshot_with_a_spark_master(standalone, kafka, committed_group, tmp_path):
    """The CLI itself given --master spark://...: a session of its own on the cluster."""
    out = tmp_path / "snapshot"
    result = subprocess.run([sys.executable, "-m", "tidemark.cli", "spark", "offsets-snapshot", "--master",
                             standalone.url, "--bootstrap-server", kafka.bootstrap, "--output", str(out),
                             "--format", "csv"], capture_output=True, text=True, timeout=600,
                            env={**standalone.driver_env(), "PYSPARK_SUBMIT_ARGS": " ".join(
                                f"--conf {k}={v}" for k, v in standalone.executor_conf().items()) + " pyspark-shell"})
    submitted(result)
    assert f"master {standalone.url}" in result.stdout
    assert jobs_rows(csv_rows(out), "topic", "committed_offset") == {
        p: ("jobs-topic", str(o)) for p, o in committed_group.items()}


def test_lag_report_under_spark_submit_from_files(standalone, kafka, committed_group, tmp_path):
    """spark-submit runs the CLI unchanged on its own session; the executors read the segment files."""
    out = tmp_path / "lag"
    main = os.path.join(source_root(), "tidemark", "cli", "__main__.py")
    result = submitted(standalone.submit(main, "spark", "lag-report", "--data-dir", str(kafka.data_dir),
                                         "--output", str(out), "--format", "csv"))
    assert f"master {standalone.url}" in result.stdout
    assert jobs_rows(csv_rows(out), "committed_offset", "log_end_offset", "lag") == {
        p: (str(o), "10", str(10 - o)) for p, o in committed_group.items()}


def test_expiry_report_under_spark_submit(standalone, kafka, committed_group, tmp_path):
    out = tmp_path / "expiry"
    main = os.path.join(source_root(), "tidemark", "cli", "__main__.py")
    result = submitted(standalone.submit(main, "spark", "expiry-report", "--bootstrap-server", kafka.bootstrap,
                                         "--at", "2100-01-01T00:00:00Z", "--retention-minutes", "1",
                                         "--output", str(out), "--format", "csv"))
    assert f"master {standalone.url}" in result.stdout
    # A member-less commit expires a retention after itself: long before 2100.
    assert jobs_rows(csv_rows(out), "committed_offset", "expires") == {
        p: (str(o), "true") for p, o in committed_group.items()}


# ---------------------------------------------------------------------------------------------
# Executors that do not share the driver's virtualenv


EXECUTOR_ONLY = {"spark.executorEnv.TIDEMARK_TEST_EXECUTOR": "1", "spark.executorEnv.PYTHONPATH": None}


def executor_python(directory: Path, without: tuple[str, ...]) -> str:
    """spark.pyspark.python for executors that do not share the driver's virtualenv: in an
    executor (TIDEMARK_TEST_EXECUTOR, see EXECUTOR_ONLY) the interpreter the venv was made from,
    seeing the venv's packages but tidemark and `without`; on the driver (Spark's planning
    workers use the same setting) this Python, as on a driver host that has everything."""
    import site

    packages = Path(site.getsitepackages()[0])
    farm = directory / "site-packages"
    farm.mkdir(parents=True)
    hidden = ("tidemark", "__editable__", *without)
    for entry in packages.iterdir():
        if not entry.name.startswith(hidden) and not entry.name.endswith(".pth"):
            (farm / entry.name).symlink_to(entry)
    wrapper = directory / "python"
    wrapper.write_text(
        '#!/bin/sh\n'
        f'[ -n "$TIDEMARK_TEST_EXECUTOR" ] || exec {sys.executable} "$@"\n'
        f'PYTHONPATH="{farm}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys._base_executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def zip_of_tidemark(standalone: StandaloneCluster, tmp_path: Path) -> Path:
    archive = tmp_path / "tidemark.zip"
    subprocess.run([sys.executable, "-m", "tidemark.spark.package", str(archive)], check=True,
                   env=standalone.driver_env(), timeout=60)
    return archive


def test_tidemark_shipped_with_py_files(standalone, kafka, tmp_path):
    """Executors whose Python has confluent-kafka but no tidemark: --py-files with the zip that
    `python -m tidemark.spark.package` builds runs the source, the stream and the sink."""
    python = executor_python(tmp_path / "executor-python", ())
    check = subprocess.run([python, "-c", "import tidemark"], capture_output=True, text=True,
                           env={"TIDEMARK_TEST_EXECUTOR": "1"})
    assert "No module named 'tidemark'" in check.stderr
    archive = zip_of_tidemark(standalone, tmp_path)
    create_topic(kafka, "shipped-in", PARTITIONS)
    create_topic(kafka, "shipped-out", PARTITIONS)
    sent = produce(kafka, "shipped-in", 60, PARTITIONS)
    result_path = tmp_path / "result.json"
    submitted(standalone.submit(str(PIPELINE), kafka.bootstrap, "shipped-in", "shipped-out", "shipped",
                                str(tmp_path / "checkpoint"), str(result_path), options=("--py-files", str(archive)),
                                conf={"spark.pyspark.python": python, **EXECUTOR_ONLY}))
    batch = json.loads(result_path.read_text())["batch"]
    assert {(p, o, v.encode()) for p, o, v in batch} == expected_offsets(sent, PARTITIONS)
    assert sorted(read_all(kafka, "shipped-out", PARTITIONS)) == sorted(v for _, _, v in sent)
    assert committed(kafka, "shipped") == {("shipped-in", p): 20 for p in range(PARTITIONS)}


@pytest.mark.parametrize("missing", ["tidemark", "confluent_kafka"])
def test_a_missing_package_on_the_executor_is_named(standalone, kafka, tmp_path, missing):
    """Not a pickling traceback: the task fails naming the missing module and how to ship it."""
    python = executor_python(tmp_path / "executor-python", ("confluent_kafka",) if missing == "confluent_kafka" else ())
    archive = zip_of_tidemark(standalone, tmp_path)
    create_topic(kafka, f"missing-{missing}", 1)
    produce(kafka, f"missing-{missing}", 5, 1)
    result = standalone.submit(str(PIPELINE), kafka.bootstrap, f"missing-{missing}", "unused", "unused",
                               str(tmp_path / "checkpoint"), str(tmp_path / "result.json"),
                               options=("--py-files", str(archive)) if missing != "tidemark" else (),
                               conf={"spark.pyspark.python": python, **EXECUTOR_ONLY, "spark.task.maxFailures": "1"})
    assert result.returncode != 0
    hint = HINTS[missing]
    output = result.stdout + result.stderr
    assert f"cannot run in this Python ({sys._base_executable}): module {missing!r} is not importable; {hint}" in output, \
        output[-5000:]
