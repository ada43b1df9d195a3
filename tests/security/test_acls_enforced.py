"""ACLs enforced over the wire, as Kafka's AclAuthorizer enforces them: real clients (confluent-kafka)
as User:ANONYMOUS against a broker with the authorizer on. ACLs are created through the admin
API while User:ANONYMOUS is a super user; the broker then restarts without super.users, so the
ACLs it enforces come from its data directory. Allowed operations work; each refused operation
gets Kafka's error, and the offsets log is byte-for-byte unchanged afterwards."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from confluent_kafka import ConsumerGroupTopicPartitions

from tests.conftest import BrokerProcess
from tests.integration.clients import create_topic, produce_all
from tests.integration.raw import RawClient

AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
ANON = "User:ANONYMOUS"
BOUND_S = 60.0  # a hang guard, never a margin

ACLS = [
    AclBinding(ResourceType.TOPIC, "open-", ResourcePatternType.PREFIXED, ANON, "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "open-", ResourcePatternType.PREFIXED, ANON, "*", AclOperation.WRITE,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.TOPIC, "open-denied", ResourcePatternType.LITERAL, "User:*", "*", AclOperation.WRITE,
               AclPermissionType.DENY),
    AclBinding(ResourceType.TOPIC, "secret", ResourcePatternType.LITERAL, ANON, "*", AclOperation.DESCRIBE,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "readers", ResourcePatternType.LITERAL, ANON, "*", AclOperation.READ,
               AclPermissionType.ALLOW),
    AclBinding(ResourceType.GROUP, "watchers", ResourcePatternType.LITERAL, ANON, "*", AclOperation.DESCRIBE,
               AclPermissionType.ALLOW),
]


def _offsets_log(data_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.glob("__consumer_offsets-*/*.log"))}


def _code(exc: BaseException) -> int:
    assert isinstance(exc, KafkaException), exc
    return exc.args[0].code()


def _partition_code(future, _index: int) -> int:
    """The error an admin result reports, whether for the whole request or its one partition."""
    try:
        result = future.result(timeout=BOUND_S)
    except KafkaException as exc:
        return _code(exc)
    (tp,) = result.topic_partitions
    assert tp.error is not None, tp
    return tp.error.code()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("acls") / "data"
    setup = BrokerProcess(data_dir, {**AUTHORIZER, "super.users": ANON}).start()
    try:
        bootstrap = setup.bootstrap
        for topic in ("open-a", "open-denied", "secret", "hidden"):
            create_topic(bootstrap, topic, 1)
        for topic in ("open-a", "secret"):
            produce_all(bootstrap, topic, [(0, None, f"{topic}-{i}".encode()) for i in range(5)])
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for group, offset in (("readers", 3), ("watchers", 2), ("hidden-g", 1)):
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition("open-a", 0, offset)])])[group].result(timeout=BOUND_S)
        for future in admin.create_acls(ACLS, request_timeout=15).values():
            future.result(timeout=BOUND_S)
        setup.stop()
        broker = BrokerProcess(data_dir, AUTHORIZER, port=setup.port).start()  # no super user now
    finally:
        setup.kill()
    yield broker
    broker.kill()


def test_acls_survive_the_restart_and_are_described(secured):
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    # DescribeAcls needs DESCRIBE on the cluster, which User:ANONYMOUS no longer has (asked raw:
    # confluent-kafka's describe_acls reports a refused DescribeAcls as an empty list).
    with RawClient(secured.bootstrap) as raw:
        answer = raw.request(29, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                     "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                     "operation": 1, "permission_type": 1})
    assert answer.error_code == KafkaError.CLUSTER_AUTHORIZATION_FAILED and answer.resources == ()
    futures = admin.create_acls([ACLS[0]], request_timeout=15)
    with pytest.raises(KafkaException) as refused:
        next(iter(futures.values())).result(timeout=BOUND_S)
    assert _code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # The restarted broker loaded them from its data directory: Metadata shows what it may describe.
    topics = set(admin.list_topics(timeout=BOUND_S).topics)
    assert topics == {"open-a", "open-denied", "secret"}


def test_allowed_and_refused_operations(secured):
    bootstrap = secured.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # -- allowed: produce, consume in a group from its committed offset, commit, describe, list
    produce_all(bootstrap, "open-a", [(0, None, b"open-a-5")])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["open-a"])
    values = []
    deadline = time.monotonic() + BOUND_S
    while len(values) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            assert msg.error() is None, msg.error()
            values.append(msg.value())
    assert values == [b"open-a-3", b"open-a-4", b"open-a-5"]
    consumer.commit(offsets=[TopicPartition("open-a", 0, 6)], asynchronous=False)
    assert consumer.committed([TopicPartition("open-a", 0)], timeout=BOUND_S)[0].offset == 6
    consumer.close()
    described = admin.describe_consumer_groups(["watchers"], request_timeout=15)["watchers"].result(timeout=BOUND_S)
    assert described.group_id == "watchers"
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=BOUND_S)
    assert {g.group_id for g in listed.valid} == {"readers", "watchers"}  # not hidden-g

    before = _offsets_log(secured.data_dir)
    assert before

    # -- refused: each gets Kafka's code, and nothing is written
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "watchers", "enable.auto.commit": False})
    with pytest.raises(KafkaException) as commit:  # commit: READ on the group needed
        watcher.commit(offsets=[TopicPartition("open-a", 0, 4)], asynchronous=False)
    assert _code(commit.value) == KafkaError.GROUP_AUTHORIZATION_FAILED
    watcher.close()

    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    try:  # commit on a topic the group may read but the principal may not
        answered = reader.commit(offsets=[TopicPartition("secret", 0, 4)], asynchronous=False)
        codes = [tp.error.code() for tp in answered]
    except KafkaException as exc:
        codes = [_code(exc)]
    assert codes == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # fetch offsets of a topic the principal may not describe
    fetched = reader.committed([TopicPartition("hidden", 0)], timeout=BOUND_S)
    assert fetched[0].error is not None and fetched[0].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    reader.close()

    with pytest.raises(KafkaException) as fetch_offsets:  # fetch offsets: DESCRIBE on the group
        admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("nobody", [TopicPartition("open-a", 0)])],
                                          request_timeout=15)["nobody"].result(timeout=BOUND_S)
    assert _code(fetch_offsets.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    with pytest.raises(KafkaException) as describe:  # describe: DESCRIBE on the group
        admin.describe_consumer_groups(["nobody"], request_timeout=15)["nobody"].result(timeout=BOUND_S)
    assert _code(describe.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    # reset: OffsetCommit, READ on the group (the admin client reports it per partition)
    reset = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        "watchers", [TopicPartition("open-a", 0, 0)])])["watchers"]
    assert [_partition_code(reset, tp) for tp in [0]] == [KafkaError.GROUP_AUTHORIZATION_FAILED]

    with pytest.raises(KafkaException) as delete:  # delete: DELETE on the group
        admin.delete_consumer_groups(["readers"], request_timeout=15)["readers"].result(timeout=BOUND_S)
    assert _code(delete.value) == KafkaError.GROUP_AUTHORIZATION_FAILED

    with RawClient(bootstrap) as raw:  # delete offsets (OffsetDelete v0): DELETE on the group
        answer = raw.request(47, 0, {"group_id": "readers", "topics": [
            {"name": "open-a", "partitions": [{"partition_index": 0}]}]})
    assert answer.error_code == KafkaError.GROUP_AUTHORIZATION_FAILED

    for topic in ("secret", "open-denied"):  # produce: WRITE on the topic (a deny wins over the prefix)
        errors = []
        producer = Producer({"bootstrap.servers": bootstrap, "message.send.max.retries": 0})
        producer.produce(topic, b"x", partition=0, on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(BOUND_S) == 0
        assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED], topic

    fetcher = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    fetcher.assign([TopicPartition("secret", 0, 0)])  # fetch: READ on the topic
    error = None
    deadline = time.monotonic() + BOUND_S
    while error is None and time.monotonic() < deadline:
        msg = fetcher.poll(0.5)
        if msg is not None:
            assert msg.error() is not None, msg.value()
            error = msg.error()
    fetcher.close()
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    assert _offsets_log(secured.data_dir) == before
    # And what the group had committed is still what it reads.
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": "readers", "enable.auto.commit": False})
    assert check.committed([TopicPartition("open-a", 0)], timeout=BOUND_S)[0].offset == 6
    check.close()
