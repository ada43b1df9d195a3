"""SCRAM credentials: kept salted and iterated (never the password), in the data directory or in
ZooKeeper's /config/users in Kafka's layout; managed with `tidemark users` offline and with
AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554) through the broker."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from tests.security.clients import confluent
from tests.security.conftest import PASSWORD, ListenersBroker, add_user, stop
from tests.zk.conftest import chroot, zk, zookeeper  # noqa: F401 - fixtures
from tidemark.broker.security.scram_store import (
    FILE_NAME,
    FileCredentialStore,
    ScramCredential,
    check_password,
    make_credential,
    sanitize,
)

SHA_256, SHA_512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512


def _users(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tidemark.cli", "users", *args], capture_output=True, text=True,
                          timeout=120)


def test_a_credential_is_kafkas_salted_string_and_checks_only_its_password():
    credential = make_credential("SCRAM-SHA-512", "pw", 4096)
    text = credential.to_kafka()
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_kafka(text) == credential
    assert check_password("SCRAM-SHA-512", credential, "pw")
    assert not check_password("SCRAM-SHA-512", credential, "pW")


def test_the_cli_keeps_users_in_the_data_directory_without_their_passwords(tmp_path):
    data_dir = tmp_path / "data"
    out = add_user(data_dir, "alice", "correct horse", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert "alice: SCRAM-SHA-256, SCRAM-SHA-512 set (4096 iterations)" in out
    stored = (data_dir / FILE_NAME).read_text()
    assert "correct horse" not in stored
    assert (data_dir / FILE_NAME).stat().st_mode & 0o077 == 0  # the owner's alone
    assert list(tmp_path.glob(f"data/{FILE_NAME}*.tmp")) == []  # written beside, renamed
    listed = _users("list", "--data-dir", str(data_dir))
    assert listed.stdout == "alice\tSCRAM-SHA-256(iterations=4096), SCRAM-SHA-512(iterations=4096)\n"
    assert _users("remove", "alice", "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data_dir)).returncode == 0
    assert set(FileCredentialStore(data_dir).get("alice")) == {"SCRAM-SHA-512"}
    missing = _users("remove", "bob", "--data-dir", str(data_dir))
    assert missing.returncode == 1 and "bob has no SCRAM credential" in missing.stderr
    assert _users("list", "--data-dir", str(data_dir), "--zookeeper", "x").returncode == 2


@pytest.fixture(scope="module")
def admin_broker(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("scram-admin") / "data"
    add_user(data_dir, "alice", PASSWORD, "SCRAM-SHA-512")
    broker = ListenersBroker(data_dir, {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}).start()
    yield broker
    stop(broker)


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address("PLAINTEXT"), "log_level": 0})


def _error_code(future) -> int:
    with pytest.raises(KafkaException) as caught:
        future.result(timeout=60)
    return caught.value.args[0].code()


def test_admin_clients_add_describe_and_delete_users_through_the_broker(admin_broker):
    admin = _admin(admin_broker)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(SHA_256, 8192), b"bob-secret"),
        UserScramCredentialUpsertion("carol", ScramCredentialInfo(SHA_512, 4096), b"carol-secret", salt=b"salty"),
    ])
    for future in futures.values():
        future.result(timeout=60)
    described = admin.describe_user_scram_credentials().result(timeout=60)
    assert {user: sorted((i.mechanism, i.iterations) for i in d.scram_credential_infos)
            for user, d in described.items()} == {
        "alice": [(SHA_512, 4096)], "bob": [(SHA_256, 8192)], "carol": [(SHA_512, 4096)]}
    # bob's new credential authenticates at once
    security = {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-256", "username": "bob",
                "password": "bob-secret"}
    assert confluent(admin_broker.address("SASL_PLAINTEXT"), security, "bobs", "bobs-group")[1] == 3
    admin.alter_user_scram_credentials([UserScramCredentialDeletion("bob", SHA_256)])["bob"].result(timeout=60)
    assert "bob" not in admin.describe_user_scram_credentials().result(timeout=60)


def test_alterations_kafka_refuses_are_refused_with_its_errors(admin_broker):
    admin = _admin(admin_broker)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("few", ScramCredentialInfo(SHA_256, 1000), b"pw"),
        UserScramCredentialUpsertion("many", ScramCredentialInfo(SHA_256, 20000), b"pw"),
        UserScramCredentialDeletion("ghost", SHA_512),
    ])
    assert _error_code(futures["few"]) == ErrorCode.unacceptable_credential
    assert _error_code(futures["many"]) == ErrorCode.unacceptable_credential
    assert _error_code(futures["ghost"]) == ErrorCode.resource_not_found
    described = admin.describe_user_scram_credentials(["alice", "nobody"])
    assert [i.iterations for i in described["alice"].result(timeout=60).scram_credential_infos] == [4096]
    assert _error_code(described["nobody"]) == ErrorCode.resource_not_found


def test_zookeeper_keeps_kafkas_layout_and_a_clustered_broker_authenticates_from_it(tmp_path, chroot, zk):  # noqa: F811
    root = "/" + chroot.split("/", 1)[1]
    add_user(tmp_path / "unused", "alice", PASSWORD, "SCRAM-SHA-512", where=("--zookeeper", chroot))
    value = json.loads(zk.get(f"{root}/config/users/alice")[0])
    assert value["version"] == 1 and list(value["config"]) == ["SCRAM-SHA-512"]
    assert ScramCredential.from_kafka(value["config"]["SCRAM-SHA-512"]).iterations == 4096
    notices = [json.loads(zk.get(f"{root}/config/changes/{c}")[0]) for c in zk.get_children(f"{root}/config/changes")]
    assert {"version": 2, "entity_path": "users/alice"} in notices
    # Other keys of the user's config (a quota kafka-configs.sh set) are kept.
    zk.set(f"{root}/config/users/alice", json.dumps({"version": 1, "config": {
        **value["config"], "producer_byte_rate": "1024"}}).encode())

    broker = ListenersBroker(tmp_path / "data", {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
                             {"zookeeper.connect": chroot, "offsets.topic.replication.factor": "1"}).start()
    try:
        security = {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512", "username": "alice",
                    "password": PASSWORD}
        assert confluent(broker.address("SASL_PLAINTEXT"), security, "zk-users", "zk-group")[1] == 3
        registration = json.loads(zk.get(f"{root}/brokers/ids/0")[0])
        assert registration["endpoints"] == [f"PLAINTEXT://{broker.address('PLAINTEXT')}",
                                             f"SASL_PLAINTEXT://{broker.address('SASL_PLAINTEXT')}"]
        assert registration["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT",
                                                                  "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
        assert (registration["host"], registration["port"]) == ("127.0.0.1", broker.ports["PLAINTEXT"])
        # Through the broker, into ZooKeeper
        admin = AdminClient({"bootstrap.servers": broker.address("PLAINTEXT"), "log_level": 0})
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "dave", ScramCredentialInfo(SHA_512, 4096), b"dave-secret")])["dave"].result(timeout=60)
        stored = json.loads(zk.get(f"{root}/config/users/{sanitize('dave')}")[0])["config"]
        assert ScramCredential.from_kafka(stored["SCRAM-SHA-512"]).iterations == 4096
        assert json.loads(zk.get(f"{root}/config/users/alice")[0])["config"]["producer_byte_rate"] == "1024"
        assert _users("list", "--zookeeper", chroot).stdout.splitlines() == [
            "alice\tSCRAM-SHA-512(iterations=4096)", "dave\tSCRAM-SHA-512(iterations=4096)"]
    finally:
        stop(broker)


@pytest.mark.parametrize("key, version, body", [
    (50, 0, b"\xff\xff\xff\xf0\x0f" + bytes(8)),  # a users array of 4 billion entries
    (51, 0, b"\x01\xff\xff\xff\xf0\x0f" + bytes(8)),  # no deletions, then a huge upsertions array
    (3, 12, b"\xff\xff\xff\xf0\x0f" + bytes(8)),  # Metadata's topics
    (3, 9, b"\x02\x02a\x00\xff\xff\xff\xf0\x0f"),  # a sane array, then garbage where the flags are
])
def test_a_garbage_collection_length_is_refused_not_allocated(admin_broker, key, version, body):
    """kio reserves memory for an array's claimed length: the broker checks it first, closes
    that connection, and goes on serving."""
    import struct

    from tests.security.conftest import RawClient

    header = struct.pack(">hhih", key, version, 7, 4) + b"junk" + b"\x00"  # request header v2
    client = RawClient(admin_broker.address("PLAINTEXT"))
    client.send_raw(header + body)
    assert client.closed_by_broker()
    admin = _admin(admin_broker)
    described = admin.describe_user_scram_credentials(["alice"])
    assert described["alice"].result(timeout=60).user == "alice"
