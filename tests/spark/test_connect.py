"""The "tidemark" and "tidemark-offsets" formats from a Spark Connect client session: a local
Connect server (the spark-connect jar pyspark ships, started here on a free loopback port) runs
the data sources in its Python workers; the test process is only a thin gRPC client. Needs
pyspark's connect extras (grpcio, grpcio-status, googleapis-common-protos, pandas, zstandard)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("grpc", reason="Spark Connect needs pyspark's connect extras (pip install 'pyspark[connect]')")
pytest.importorskip("pandas", reason="Spark Connect needs pyspark's connect extras (pip install 'pyspark[connect]')")

from tests.conftest import BrokerProcess, free_port  # noqa: E402
from tests.spark.standalone import SPARK_HOME, source_root  # noqa: E402
from tests.spark.test_source import committed, create_topic, expected_offsets, produce  # noqa: E402

START_TIMEOUT_S = 180.0
QUERY_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def kafka(group_broker: BrokerProcess) -> BrokerProcess:
    """The module's broker: tests/conftest.py's, set up for consumer groups."""
    return group_broker


@pytest.fixture(scope="module")
def connect(tmp_path_factory) -> Iterator:
    """A Spark Connect server on local[2], and a client session to it."""
    root = tmp_path_factory.mktemp("connect")
    port = free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYTHONPATH": source_root(), "PYSPARK_PYTHON": sys.executable}
    log = open(root / "server.log", "ab")
    server = subprocess.Popen(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.sql.shuffle.partitions=2", "--conf", f"spark.pyspark.python={sys.executable}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the Connect server exited: {(root / 'server.log').read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the Connect server did not listen in time") from None
                time.sleep(0.2)
        from pyspark.sql import SparkSession

        from tidemark.spark import register

        # builder.remote() marks the whole process as Spark Connect (SPARK_CONNECT_MODE_ENABLED,
        # SPARK_REMOTE) and stop() leaves the marks: restore the environment, or every later
        # local session (and every spark-submit child) would look for a Connect server.
        saved = {key: os.environ.get(key) for key in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
        session = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        try:
            register(session)
            yield session
        finally:
            session.stop()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        try:
            os.killpg(server.pid, signal.SIGKILL)  # Python workers it left behind
        except ProcessLookupError:
            pass


def test_batch_read_over_connect(connect, kafka):
    create_topic(kafka, "connect-batch", 3)
    sent = produce(kafka, "connect-batch", 90, 3)
    df = connect.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap).option("subscribe", "connect-batch")
    rows = df.load().collect()
    assert {(r.partition, r.offset, r.value) for r in rows} == expected_offsets(sent, 3)


def test_stream_with_group_commits_into_the_sink_over_connect(connect, kafka, tmp_path):
    create_topic(kafka, "connect-in", 3)
    create_topic(kafka, "connect-out", 3)
    sent = produce(kafka, "connect-in", 120, 3)
    stream = (connect.readStream.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
              .option("subscribe", "connect-in").option("startingOffsets", "earliest")
              .option("group.id", "connect-pipeline").option("maxOffsetsPerTrigger", "50").load())
    query = (stream.selectExpr("key", "value").writeStream.format("tidemark")
             .option("bootstrap.servers", kafka.bootstrap).option("topic", "connect-out")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish in time"
    assert query.exception() is None, query.exception()
    assert committed(kafka, "connect-pipeline") == {("connect-in", p): 40 for p in range(3)}
    out = (connect.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
           .option("subscribe", "connect-out").load().collect())
    assert sorted(r.value for r in out) == sorted(v for _, _, v in sent)


def test_batch_sink_and_offsets_log_over_connect(connect, kafka):
    create_topic(kafka, "connect-written", 2)
    rows = connect.createDataFrame([(f"k{i}", f"v{i}", i % 2) for i in range(10)], "key string, value string, partition int")
    rows.write.format("tidemark").option("bootstrap.servers", kafka.bootstrap).option("topic", "connect-written") \
        .mode("append").save()
    back = (connect.read.format("tidemark").option("bootstrap.servers", kafka.bootstrap)
            .option("subscribe", "connect-written").load().collect())
    assert sorted((r.partition, r.value) for r in back) == sorted((i % 2, f"v{i}".encode()) for i in range(10))
    # The earlier test's group commits, read back from __consumer_offsets.
    log = (connect.read.format("tidemark-offsets").option("bootstrap.servers", kafka.bootstrap).load()
           .where("record_type = 'offset_commit' AND `group` = 'connect-pipeline'").collect())
    last = {}
    for r in sorted(log, key=lambda r: (r.offsets_partition, r.log_offset)):
        last[(r.topic, r.partition)] = r.committed_offset
    assert last == committed(kafka, "connect-pipeline")
