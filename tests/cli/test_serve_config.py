"""`tidemark serve --config server.properties`: a real broker process configured by a Kafka
properties file (comments, `key=value` and `key: value`); Kafka's stock server.properties,
its places used and its settings tidemark lacks listed once; settings that change what the
broker means refused."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.conftest import free_port
from tests.integration.raw import RawClient
from tidemark.broker.config import BROKER_SETTINGS
from tidemark.records.batch import build_batch
from tidemark.wire.api_keys import ApiKey

PROPERTIES = """\
# server.properties, as Kafka's own example file writes them
num.partitions=3
! a comment in Java's other style
auto.create.topics.enable: true
offsets.topic.num.partitions = 7
message.max.bytes=2000
"""


def _partition_counts(client: RawClient, *topics: str, create: bool = False) -> dict[str, int]:
    response = client.request(ApiKey.METADATA, 12, {"topics": [{"name": t, "topic_id": None} for t in topics],
                                      "allow_auto_topic_creation": create,
                                      "include_topic_authorized_operations": False})
    return {t.name: len(t.partitions) for t in response.topics}


def test_settings_from_a_properties_file_apply(make_broker, tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(PROPERTIES)
    broker = make_broker(extra_args=("--config", str(config))).start()
    with RawClient(broker.bootstrap) as client:
        assert _partition_counts(client, "auto-made", create=True) == {"auto-made": 3}  # num.partitions
        client.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates the offsets topic
        assert _partition_counts(client, "__consumer_offsets") == {"__consumer_offsets": 7}
        small = client.produce("auto-made", build_batch([(None, b"x" * 100, (), 1)]))
        large = client.produce("auto-made", build_batch([(None, b"x" * 3000, (), 1)]))
        assert (small.error_code, large.error_code) == (ErrorCode.none, ErrorCode.message_too_large)
    assert broker.stop() == 0


# Kafka's own config/server.properties (ZooKeeper mode), its settings as shipped, zookeeper.connect
# left out (this broker runs alone) and the two places rewritten for the test.
STOCK = """\
broker.id=0
listeners=PLAINTEXT://127.0.0.1:{port}
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={data}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.retention.check.interval.ms=300000
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def test_a_stock_server_properties_starts_a_broker(tmp_path: Path) -> None:
    """log.dirs and listeners place the broker; what tidemark does not implement is listed in
    one log line at start, not refused."""
    port, data = free_port(), tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(STOCK.format(port=port, data=data))
    process = subprocess.Popen([sys.executable, "-m", "tidemark.cli", "serve", "--config", str(config),
                                "--log-format", "json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60  # hang guard only: the wait ends when the broker listens
        while True:
            assert process.poll() is None and time.monotonic() < deadline, "the broker did not start"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        with RawClient(f"127.0.0.1:{port}") as client:
            assert _partition_counts(client, "made", create=True) == {"made": 1}
        assert (data / "made-0").is_dir()
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    listed = [json.loads(line) for line in output.splitlines() if "settings_not_implemented" in line]
    unknown = sorted(name for name in (line.split("=")[0] for line in STOCK.splitlines())
                     if name not in BROKER_SETTINGS and name not in ("listeners", "log.dirs"))
    assert unknown, "the stock file has settings tidemark does not implement"
    assert [entry["settings"] for entry in listed] == [unknown]


def test_settings_that_change_what_the_broker_means_are_refused(tmp_path: Path) -> None:
    for line, named in (("process.roles=broker,controller", "process.roles"),
                        ("log.dirs=/a,/b", "log.dirs")):
        config = tmp_path / "server.properties"
        config.write_text(PROPERTIES + line + "\n")
        done = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                               "--data-dir", str(tmp_path / "data"), "--config", str(config)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert named in done.stderr
        assert not (tmp_path / "data").exists()  # refused before touching anything


def test_a_typo_given_with_set_is_still_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                           "--data-dir", str(tmp_path / "data"), "--set", "log.cleaner.threads.typo=2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "log.cleaner.threads.typo" in done.stderr
    assert not (tmp_path / "data").exists()
