"""`tidemark serve --config server.properties`: a real broker process configured by a Kafka
properties file (comments, `key=value` and `key: value`), and a file with a setting it does not
know refused with a message naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kio.schema.errors import ErrorCode

from tests.conftest import free_port
from tests.integration.raw import RawClient
from tidemark.records.batch import build_batch

PROPERTIES = """\
# server.properties, as Kafka's own example file writes them
num.partitions=3
! a comment in Java's other style
auto.create.topics.enable: true
offsets.topic.num.partitions = 7
message.max.bytes=2000
"""


def _partition_counts(client: RawClient, *topics: str, create: bool = False) -> dict[str, int]:
    response = client.request(3, 12, {"topics": [{"name": t, "topic_id": None} for t in topics],
                                      "allow_auto_topic_creation": create,
                                      "include_topic_authorized_operations": False})
    return {t.name: len(t.partitions) for t in response.topics}


def test_settings_from_a_properties_file_apply(make_broker, tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(PROPERTIES)
    broker = make_broker(extra_args=("--config", str(config))).start()
    with RawClient(broker.bootstrap) as client:
        assert _partition_counts(client, "auto-made", create=True) == {"auto-made": 3}  # num.partitions
        client.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # creates the offsets topic
        assert _partition_counts(client, "__consumer_offsets") == {"__consumer_offsets": 7}
        small = client.produce("auto-made", build_batch([(None, b"x" * 100, (), 1)]))
        large = client.produce("auto-made", build_batch([(None, b"x" * 3000, (), 1)]))
        assert (small.error_code, large.error_code) == (ErrorCode.none, ErrorCode.message_too_large)
    assert broker.stop() == 0


def test_an_unknown_setting_in_the_file_is_refused_naming_it(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text(PROPERTIES + "log.cleaner.threads.typo=2\n")
    done = subprocess.run([sys.executable, "-m", "tidemark.cli", "serve", "--listen", f"127.0.0.1:{free_port()}",
                           "--data-dir", str(tmp_path / "data"), "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "log.cleaner.threads.typo" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before touching anything
