"""Burrow (the Debian package's 1.2.1, a real peer) reports a group's lag from a tidemark broker,
over SASL_SSL (its client profile with SASL PLAIN, the only mechanism Burrow 1.2.1 configures,
and TLS trusting the test CA) and over PLAINTEXT: it reads the commits from `__consumer_offsets`
and the end offsets from ListOffsets, and its HTTP API answers each partition's committed offset
and lag."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import free_port
from tests.security.clients import confluent_conf
from tests.security.conftest import PASSWORD, ListenersBroker, add_user, stop
from tidemark.zk.local_server import ZooKeeperServer, zookeeper_available

BURROW = shutil.which("Burrow") or shutil.which("burrow")
if BURROW is None:
    pytest.skip("Burrow is not installed (make system-deps installs the burrow package)", allow_module_level=True)
if not zookeeper_available():  # Burrow coordinates through ZooKeeper
    pytest.skip("ZooKeeper is not installed (make system-deps installs zookeeperd)", allow_module_level=True)

KAFKA_VERSION = "2.0.0"  # sarama's requests as Kafka 2.0 sends them: versions tidemark serves
HANG_GUARD_S = 120.0  # Burrow refreshes and evaluates on its own intervals; a hang guard, never a margin


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("burrow-zk")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certificates):
    data_dir = tmp_path_factory.mktemp("burrow") / "data"
    add_user(data_dir, "alice", PASSWORD, "SCRAM-SHA-512")
    settings = {"ssl.keystore.type": "PEM",
                "ssl.keystore.certificate.chain": certificates["broker.pem"].read_text(),
                "ssl.keystore.key": certificates["broker.key"].read_text(),
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512"}
    process = ListenersBroker(data_dir, {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"}, settings).start()
    yield process
    stop(process)


def _burrow_config(directory: Path, servers: str, zookeeper: str, http_port: int,
                   secured: dict[str, Any] | None) -> Path:
    profile = ['client-id="burrow-test"', f'kafka-version="{KAFKA_VERSION}"']
    sections = ""
    if secured is not None:
        profile += ['tls="test-ca"', 'sasl="alice"']
        # Burrow 1.2.1 loads the cafile only with a client certificate (without one it trusts the
        # system's CAs): the profile carries alice's, signed by the test CA.
        sections = (f'[tls.test-ca]\ncafile="{secured["ca"]}"\ncertfile="{secured["cert"]}"\n'
                    f'keyfile="{secured["key"]}"\nnoverify=false\n\n'
                    f'[sasl.alice]\nusername="{secured["username"]}"\npassword="{secured["password"]}"\n'
                    'handshake-first=true\n\n')
    config = directory / "burrow.toml"
    config.write_text(f"""[general]
pidfile="{directory / 'burrow.pid'}"

[logging]
level="info"

[zookeeper]
servers=["{zookeeper}"]
timeout=6
root-path="/burrow-{http_port}"

[client-profile.test]
{chr(10).join(profile)}

{sections}[cluster.tidemark]
class-name="kafka"
servers=["{servers}"]
client-profile="test"
topic-refresh=1
offset-refresh=1

[consumer.tidemark]
class-name="kafka"
cluster="tidemark"
servers=["{servers}"]
client-profile="test"
offsets-topic="__consumer_offsets"
start-latest=false
group-blacklist="^$"

[httpserver.default]
address="127.0.0.1:{http_port}"

[storage.default]
class-name="inmemory"
workers=2
intervals=10
expire-group=604800
min-distance=1
""")
    return config


def _lag(port: int, group: str) -> dict[str, Any] | None:
    """Burrow's lag answer for the group, None until it has one."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v3/kafka/tidemark/consumer/{group}/lag",
                                    timeout=30) as answer:
            body = json.loads(answer.read())
    except (urllib.error.URLError, ConnectionError):
        return None  # not serving yet, or 404: the group is not known yet
    return None if body.get("error") else body


@pytest.mark.parametrize("protocol", ["SASL_SSL", "PLAINTEXT"])
def test_burrow_reports_the_groups_lag(broker, zookeeper, certificates, tmp_path, protocol):
    security: dict[str, Any] = {"protocol": protocol}
    if protocol == "SASL_SSL":
        security.update({"mechanism": "SCRAM-SHA-512", "username": "alice", "password": PASSWORD,
                         "ca": certificates["ca.pem"]})
    address = broker.address(protocol)
    conf = confluent_conf(address, security)
    topic, group = f"burrow-{protocol.lower()}", f"burrow-group-{protocol.lower()}"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                        request_timeout=30)[topic].result(timeout=HANG_GUARD_S)
    producer = Producer(conf)
    for partition, count in ((0, 5), (1, 3)):
        for i in range(count):
            producer.produce(topic, f"{partition}-{i}".encode(), partition=partition)
    assert producer.flush(HANG_GUARD_S) == 0
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False)
    consumer.close()

    http_port = free_port()
    sasl_ssl = {"ca": certificates["ca.pem"], "cert": certificates["alice.pem"], "key": certificates["alice.key"],
                "username": "alice", "password": PASSWORD} \
        if protocol == "SASL_SSL" else None
    _burrow_config(tmp_path, address, zookeeper.connect, http_port, sasl_ssl)  # written into tmp_path
    log_path = tmp_path / "burrow.log"
    with open(log_path, "ab") as log:
        burrow = subprocess.Popen([BURROW, "--config-dir", str(tmp_path)], cwd=tmp_path, stdout=log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wanted = {(0, 2, 3), (1, 3, 0)}  # (partition, committed offset, lag)
        seen: set[tuple[int, int, int]] = set()
        deadline = time.monotonic() + HANG_GUARD_S
        while seen != wanted:
            assert burrow.poll() is None, f"Burrow exited {burrow.returncode}:\n{log_path.read_text()}"
            assert time.monotonic() < deadline, f"Burrow reported {seen}, not {wanted}:\n{log_path.read_text()}"
            answer = _lag(http_port, group)
            if answer is not None:
                seen = {(p["partition"], p["end"]["offset"], p["current_lag"])
                        for p in answer["status"]["partitions"] if p.get("end")}
            if seen != wanted:
                time.sleep(0.2)  # the polling interval only: Burrow answers once it has read the commits
        assert answer["status"]["totallag"] == 3
    finally:
        burrow.terminate()
        try:
            burrow.wait(timeout=30)
        except subprocess.TimeoutExpired:
            burrow.kill()
            burrow.wait()
