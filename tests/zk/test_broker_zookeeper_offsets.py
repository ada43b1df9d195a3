"""A broker with offsets.storage=zookeeper: real clients commit and fetch, the znodes hold the
offsets, nothing goes to __consumer_offsets; OffsetCommit/OffsetFetch v0 always use ZooKeeper;
ZooKeeper not answering is COORDINATOR_NOT_AVAILABLE, and a refused transaction changes nothing."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata
from kazoo.security import make_acl
from kio.schema.errors import ErrorCode

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tests.integration.raw import RawClient
from tidemark.wire import offsets_v0
from tidemark.wire.api_keys import ApiKey

# With zookeeper.connect a broker is a cluster member: alone, it holds the offsets topic's only
# replica (Kafka too needs offsets.topic.replication.factor=1 on a one-broker cluster).
ZK_SETTINGS = {"offsets.storage": "zookeeper", "group.initial.rebalance.delay.ms": "0",
               "offsets.topic.replication.factor": "1",
               "offsets.topic.num.partitions": "3", "offsets.commit.timeout.ms": "2000",
               # A session that outlives the pauses below: only the request's own bound answers.
               "zookeeper.session.timeout.ms": "60000"}


@pytest.fixture(scope="module")
def zk_broker(zookeeper, tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("zk-broker") / "data"
    process = BrokerProcess(data_dir, {**ZK_SETTINGS, "zookeeper.connect": zookeeper.connect}).start()
    yield process
    process.kill()


def znode_offset(zk, group: str, topic: str, partition: int, root: str = "") -> bytes:
    return zk.get(f"{root}/consumers/{group}/offsets/{topic}/{partition}")[0]


def offsets_topic_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in data_dir.glob("__consumer_offsets-*/*.log"))


def test_confluent_kafka_commits_land_in_znodes(zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, "zk-ck", 3)
    consumer = Consumer({"bootstrap.servers": zk_broker.bootstrap, "group.id": "ck-group",
                         "enable.auto.commit": False})
    try:
        wanted = [TopicPartition("zk-ck", 0, 5), TopicPartition("zk-ck", 1, 7), TopicPartition("zk-ck", 2, 9)]
        consumer.commit(offsets=wanted, asynchronous=False)
        committed = consumer.committed([TopicPartition("zk-ck", p) for p in range(3)], timeout=15)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 5, None), (1, 7, None), (2, 9, None)]
        # A later commit overwrites the znode.
        consumer.commit(offsets=[TopicPartition("zk-ck", 1, 8)], asynchronous=False)
        assert consumer.committed([TopicPartition("zk-ck", 1)], timeout=15)[0].offset == 8
    finally:
        consumer.close()
    assert [znode_offset(zk, "ck-group", "zk-ck", p) for p in range(3)] == [b"5", b"8", b"9"]
    assert offsets_topic_bytes(zk_broker.data_dir) == 0


def test_kafka_python_commits_land_in_znodes(zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, "zk-kp", 2)
    consumer = KafkaConsumer(bootstrap_servers=zk_broker.bootstrap, group_id="kp-group", enable_auto_commit=False)
    try:
        tp0, tp1 = KafkaTopicPartition("zk-kp", 0), KafkaTopicPartition("zk-kp", 1)
        consumer.assign([tp0, tp1])
        consumer.commit({tp0: OffsetAndMetadata(11, "kept?", -1), tp1: OffsetAndMetadata(3, "", -1)})
        assert (consumer.committed(tp0), consumer.committed(tp1)) == (11, 3)
    finally:
        consumer.close()
    assert (znode_offset(zk, "kp-group", "zk-kp", 0), znode_offset(zk, "kp-group", "zk-kp", 1)) == (b"11", b"3")
    # ZooKeeper storage keeps no metadata: the fetch answers "".
    with RawClient(zk_broker.bootstrap) as raw:
        response = raw.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "kp-group", "topics": [
            {"name": "zk-kp", "partition_indexes": [0]}]}], "require_stable": False})
    partition = response.groups[0].topics[0].partitions[0]
    assert (partition.committed_offset, partition.metadata, partition.error_code) == (11, "", ErrorCode.none)
    assert offsets_topic_bytes(zk_broker.data_dir) == 0


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (make test installs it)")
def test_v10_names_topics_by_id_in_zookeeper_too(zk_broker, zk) -> None:
    unknown = uuid.uuid4()
    with RawClient(zk_broker.bootstrap) as raw:
        known = raw.create_topic("zk-ids").topic_id
        committed = raw.request(ApiKey.OFFSET_COMMIT, 10, {"group_id": "ids-group", "generation_id_or_member_epoch": -1,
                                        "member_id": "", "group_instance_id": None, "topics": [
            {"topic_id": t, "partitions": [{"partition_index": 0, "committed_offset": 21,
                                            "committed_leader_epoch": -1, "committed_metadata": None}]}
            for t in (unknown, known)]})
        assert [(t.topic_id, t.partitions[0].error_code) for t in committed.topics] == [
            (unknown, ErrorCode.unknown_topic_id), (known, ErrorCode.none)]
        fetched = raw.request(ApiKey.OFFSET_FETCH, 10, {"require_stable": False, "groups": [
            {"group_id": "ids-group", "member_id": None, "member_epoch": -1,
             "topics": [{"topic_id": t, "partition_indexes": [0]} for t in (unknown, known)]}]})
        assert [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code)
                for t in fetched.groups[0].topics] == [(unknown, -1, ErrorCode.unknown_topic_id),
                                                        (known, 21, ErrorCode.none)]
    assert znode_offset(zk, "ids-group", "zk-ids", 0) == b"21"


def test_kcat_group_resumes_from_the_znode(zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, "zk-kcat", 1)
    produce_all(zk_broker.bootstrap, "zk-kcat", [(0, None, b"first %d" % i) for i in range(5)])

    def kcat_group() -> list[str]:
        result = subprocess.run(
            ["kcat", "-b", zk_broker.bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-e", "-f", "%o %s\n",
             "-X", "enable.auto.commit=true", "zk-kcat"],
            capture_output=True, timeout=60, check=True)
        return result.stdout.decode().splitlines()

    assert kcat_group() == [f"{i} first {i}" for i in range(5)]
    assert znode_offset(zk, "kcat-group", "zk-kcat", 0) == b"5"
    produce_all(zk_broker.bootstrap, "zk-kcat", [(0, None, b"second %d" % i) for i in range(3)])
    assert kcat_group() == [f"{5 + i} second {i}" for i in range(3)]
    assert znode_offset(zk, "kcat-group", "zk-kcat", 0) == b"8"


def _v0_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client_id = b"raw-v0"
    return (api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big")
            + len(client_id).to_bytes(2, "big") + client_id + body)


def test_offset_commit_and_fetch_v0_use_zookeeper_whatever_the_storage(chroot, zk, make_broker) -> None:
    # A one-broker cluster of its own (a chroot), so it coordinates every group.
    root = "/" + chroot.split("/", 1)[1]
    broker = make_broker({"zookeeper.connect": chroot, "offsets.storage": "kafka",
                          "offsets.topic.replication.factor": "1"}).start()
    create_topic(broker.bootstrap, "zk-v0", 2)
    commit = offsets_v0.OffsetCommitV0Request(group_id="v0-group", topics=(
        offsets_v0.OffsetCommitV0Topic("zk-v0", (offsets_v0.OffsetCommitV0Partition(0, 42, "meta"),
                                                 offsets_v0.OffsetCommitV0Partition(1, 43, None))),))
    fetch = offsets_v0.OffsetFetchV0Request(group_id="v0-group", topics=(offsets_v0.OffsetFetchV0Topic("zk-v0", (0, 1)),))
    with RawClient(broker.bootstrap) as raw:
        versions = {k.api_key: (k.min_version, k.max_version) for k in raw.request(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "raw", "client_software_version": "1"}).api_keys}
        assert versions[8][0] == 0 and versions[9][0] == 0
        raw.send_frame(_v0_frame(ApiKey.OFFSET_COMMIT, 0, 1, offsets_v0.write_offset_commit(commit, 0)))
        frame = raw.recv_frame()
        committed, _ = offsets_v0.read_offset_commit_response(frame, 4)
        raw.send_frame(_v0_frame(ApiKey.OFFSET_FETCH, 0, 2, offsets_v0.write_offset_fetch(fetch)))
        fetched, _ = offsets_v0.read_offset_fetch_response(raw.recv_frame(), 4)
    assert int.from_bytes(frame[:4], "big") == 1
    assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [
        (0, ErrorCode.none), (1, ErrorCode.none)]
    assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in fetched.topics[0].partitions] == [
        (0, 42, "", ErrorCode.none), (1, 43, "", ErrorCode.none)]
    assert (znode_offset(zk, "v0-group", "zk-v0", 0, root), znode_offset(zk, "v0-group", "zk-v0", 1, root)) == (
        b"42", b"43")
    assert offsets_topic_bytes(broker.data_dir) == 0
    # v1 goes where offsets.storage says: here the offsets topic.
    v1 = offsets_v0.OffsetCommitV0Request(group_id="v1-group", topics=(
        offsets_v0.OffsetCommitV0Topic("zk-v0", (offsets_v0.OffsetCommitV0Partition(1, 77, "m", -1),)),))
    with RawClient(broker.bootstrap) as raw:
        # As a client does: find the coordinator first (it creates the offsets topic).
        assert raw.request(ApiKey.FIND_COORDINATOR, 1, {"key": "v1-group", "key_type": 0}).error_code == ErrorCode.none
        for attempt in range(50):  # the offsets topic loads on first use (COORDINATOR_LOAD_IN_PROGRESS)
            raw.send_frame(_v0_frame(ApiKey.OFFSET_COMMIT, 1, attempt, offsets_v0.write_offset_commit(v1, 1)))
            answer, _ = offsets_v0.read_offset_commit_response(raw.recv_frame(), 4)
            if answer.topics[0].partitions[0].error_code != ErrorCode.coordinator_load_in_progress:
                break
            time.sleep(0.1)  # a client's retry backoff
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "v1-group"})
    try:
        assert consumer.committed([TopicPartition("zk-v0", 1)], timeout=15)[0].offset == 77
    finally:
        consumer.close()
    assert zk.exists(f"{root}/consumers/v1-group") is None


def test_old_versions_not_advertised_without_zookeeper(make_broker) -> None:
    broker = make_broker().start()
    with RawClient(broker.bootstrap) as raw:
        versions = {k.api_key: (k.min_version, k.max_version) for k in raw.request(ApiKey.API_VERSIONS, 3, {
            "client_software_name": "raw", "client_software_version": "1"}).api_keys}
    assert versions[8][0] == 2 and versions[9][0] == 1


def commit_v8(raw: RawClient, group: str, topic: str, offsets: dict[int, int]) -> list[tuple[int, ErrorCode]]:
    response = raw.request(ApiKey.OFFSET_COMMIT, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": topic, "partitions": [
                                      {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1,
                                       "committed_metadata": None} for p, o in offsets.items()]}]})
    return [(p.partition_index, p.error_code) for p in response.topics[0].partitions]


def test_a_refused_transaction_commits_no_partition(zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, "zk-atomic", 2)
    # Partition 1's znode may be read but not written: ZooKeeper refuses that part of the multi.
    zk.ensure_path("/consumers/atomic-group/offsets/zk-atomic")
    zk.create("/consumers/atomic-group/offsets/zk-atomic/1", b"1", acl=[make_acl("world", "anyone", read=True)])
    with RawClient(zk_broker.bootstrap) as raw:
        assert commit_v8(raw, "atomic-group", "zk-atomic", {0: 100, 1: 200}) == [
            (0, ErrorCode.coordinator_not_available), (1, ErrorCode.coordinator_not_available)]
    assert zk.exists("/consumers/atomic-group/offsets/zk-atomic/0") is None
    assert znode_offset(zk, "atomic-group", "zk-atomic", 1) == b"1"


def test_zookeeper_not_answering_is_coordinator_not_available(zookeeper, zk_broker, zk) -> None:
    create_topic(zk_broker.bootstrap, "zk-down", 1)
    with RawClient(zk_broker.bootstrap) as raw:
        assert commit_v8(raw, "down-group", "zk-down", {0: 1}) == [(0, ErrorCode.none)]
        # Returns once every ZooKeeper thread has stopped: a thread not stopped yet when kill()
        # returned once answered the commit below (stored, and acknowledged rightly).
        zookeeper.pause()
        try:
            # Bounded by offsets.commit.timeout.ms (2 s), well inside the client's 15 s.
            assert commit_v8(raw, "down-group", "zk-down", {0: 2}) == [(0, ErrorCode.coordinator_not_available)]
            fetched = raw.request(ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "down-group", "topics": [
                {"name": "zk-down", "partition_indexes": [0]}]}], "require_stable": False})
            assert fetched.groups[0].error_code == ErrorCode.coordinator_not_available
        finally:
            zookeeper.resume()
        # Once ZooKeeper answers again, so does the broker (kazoo reconnects by itself): retried
        # while the client reconnects, as a Kafka client retries COORDINATOR_NOT_AVAILABLE.
        results = []
        for _ in range(20):
            results.append(commit_v8(raw, "down-group", "zk-down", {0: 3}))
            if results[-1] != [(0, ErrorCode.coordinator_not_available)]:
                break
        assert results[-1] == [(0, ErrorCode.none)]
    assert znode_offset(zk, "down-group", "zk-down", 0) == b"3"
